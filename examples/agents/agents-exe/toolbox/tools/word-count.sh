#!/bin/bash
# word-count.sh - counts the words of a text (an agents-exe bash tool: describe | run)
set -euo pipefail
if [ "${1:-}" == "describe" ]; then
    cat <<'JSON'
{
  "slug": "word_count",
  "description": "Counts the words of a text, and says where it ran.",
  "args": [
    {"name": "text", "description": "the text to count", "type": "string",
     "backing_type": "string", "arity": "single", "mode": "stdin"}
  ],
  "empty-result": {"tag": "AddMessage", "contents": "no words"}
}
JSON
    exit 0
fi
echo "$(wc -w) words, counted by uid $(id -u) for session $AGENT_SESSION_ID"
