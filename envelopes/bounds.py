"""The former name of envelopes.rules, kept for its importers: every name is that
module's (import envelopes.rules in new code)."""

from envelopes.rules import *  # noqa: F403
