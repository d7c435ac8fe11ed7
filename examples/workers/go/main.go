// Example worker in Go (standard library only): `echo` and `ledger_append`, envelope v1.
//
//	go build -o example-go . && ./example-go < request.json
//
// encoding/json accepts what a strict reader must refuse (duplicate keys, lone
// surrogates, invalid UTF-8, unbounded nesting), so strictCheck below checks the bytes
// first, and only then does encoding/json parse them. Logs go to stderr (verbose with
// AGENTS_RUNNER_LOG_LEVEL=debug); stdout carries exactly one JSON document; exit 0 with
// "ok", 1 with "error".
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

const (
	maxRequestBytes = 16 * 1024 * 1024
	maxDepth        = 64
	maxSafeInteger  = 1<<53 - 1

	// The id of an answer to a request without a valid id (section 8.2): no request has it.
	reservedID = "-"
)

var (
	supported = []string{"1.0"}
	idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	toolName  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)
	verbose   = os.Getenv("AGENTS_RUNNER_LOG_LEVEL") == "debug"

	// Section 3.1: extension keys; section 8.1: no leading zeros in a version.
	extensionKey   = regexp.MustCompile(`^[a-z][a-z0-9-]*(\.[a-z0-9-]+)*/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	versionPattern = regexp.MustCompile(`^(?:0|[1-9][0-9]{0,3})\.(?:0|[1-9][0-9]{0,3})$`)
)

// refusal is an error envelope's content: a worker code, a message, retryable.
type refusal struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

func (r *refusal) Error() string { return r.Message }

func refuse(code, format string, args ...any) *refusal {
	return &refusal{Code: code, Message: fmt.Sprintf(format, args...)}
}

func logf(format string, args ...any) {
	if verbose {
		fmt.Fprintf(os.Stderr, "example-go: "+format+"\n", args...)
	}
}

// --- strict JSON ---------------------------------------------------------------------

type scanner struct {
	data []byte
	i    int
}

func (s *scanner) fail(why string) {
	panic(refuse("INVALID_REQUEST", "request is not acceptable JSON: %s at byte %d", why, s.i))
}

func (s *scanner) ws() {
	for s.i < len(s.data) && strings.IndexByte(" \t\n\r", s.data[s.i]) >= 0 {
		s.i++
	}
}

func (s *scanner) peek() byte {
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

// str reads a string at s.i (on the quote) and returns it decoded.
func (s *scanner) str() string {
	var out []rune
	s.i++
	for {
		if s.i >= len(s.data) {
			s.fail("unterminated string")
		}
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return string(out)
		case c < 0x20:
			s.fail("control character in a string")
		case c == '\\':
			if s.i+1 >= len(s.data) {
				s.fail("bad escape")
			}
			e := s.data[s.i+1]
			if e == 'u' {
				r := s.hex4(s.i + 2)
				s.i += 6
				if utf16.IsSurrogate(r) {
					if r >= 0xdc00 || s.i+1 >= len(s.data) || s.data[s.i] != '\\' || s.data[s.i+1] != 'u' {
						s.fail("lone surrogate in a string")
					}
					low := s.hex4(s.i + 2)
					if low < 0xdc00 || low > 0xdfff {
						s.fail("lone surrogate in a string")
					}
					r = utf16.DecodeRune(r, low)
					s.i += 6
				}
				out = append(out, r)
			} else if j := strings.IndexByte(`"\/bfnrt`, e); j >= 0 {
				out = append(out, rune("\"\\/\b\f\n\r\t"[j]))
				s.i += 2
			} else {
				s.fail("bad escape")
			}
		default:
			r, size := utf8.DecodeRune(s.data[s.i:])
			out = append(out, r)
			s.i += size
		}
	}
}

func (s *scanner) hex4(at int) rune {
	if at+4 > len(s.data) {
		s.fail("bad \\u escape")
	}
	v, err := strconv.ParseUint(string(s.data[at:at+4]), 16, 32)
	if err != nil {
		s.fail("bad \\u escape")
	}
	return rune(v)
}

var numberPattern = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`)

func (s *scanner) value(depth int) {
	s.ws()
	switch c := s.peek(); c {
	case '{', '[':
		if depth > maxDepth {
			s.fail(fmt.Sprintf("nesting deeper than %d levels", maxDepth))
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		keys := map[string]bool{}
		s.i++
		s.ws()
		if s.peek() == closing {
			s.i++
			return
		}
		for {
			if c == '{' {
				s.ws()
				if s.peek() != '"' {
					s.fail("expected a key")
				}
				key := s.str()
				if keys[key] {
					s.fail(fmt.Sprintf("duplicate key %q", key))
				}
				keys[key] = true
				s.ws()
				if s.peek() != ':' {
					s.fail("expected ':'")
				}
				s.i++
			}
			s.value(depth + 1)
			s.ws()
			next := s.peek()
			s.i++
			if next == closing {
				return
			}
			if next != ',' {
				s.fail("expected ',' or a closing bracket")
			}
		}
	case '"':
		s.str()
	default:
		for _, literal := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(s.data[s.i:], []byte(literal)) {
				s.i += len(literal)
				return
			}
		}
		m := numberPattern.FindSubmatchIndex(s.data[s.i:])
		if m == nil {
			s.fail("unexpected character")
		}
		text := string(s.data[s.i : s.i+m[1]])
		n, err := strconv.ParseFloat(text, 64)
		if err != nil {
			s.fail("number overflows a double")
		}
		if m[2] < 0 && m[4] < 0 && (n > maxSafeInteger || n < -maxSafeInteger) {
			s.fail("integer outside +-(2^53-1)")
		}
		s.i += m[1]
	}
}

func strictCheck(data []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if ref, ok := r.(*refusal); ok {
				err = ref
				return
			}
			panic(r)
		}
	}()
	switch {
	case len(data) == 0:
		return refuse("INVALID_REQUEST", "empty input: expected one JSON object")
	case bytes.HasPrefix(data, []byte("\xef\xbb\xbf")):
		return refuse("INVALID_REQUEST", "input starts with a byte order mark; send plain UTF-8")
	case !utf8.Valid(data):
		return refuse("INVALID_REQUEST", "request is not valid UTF-8")
	}
	s := &scanner{data: data}
	s.ws()
	if s.peek() != '{' {
		s.fail("expected a JSON object")
	}
	s.value(1)
	s.ws()
	if s.i != len(data) {
		s.fail("trailing data after the document")
	}
	return nil
}

// --- the envelope --------------------------------------------------------------------

type request struct {
	Kind      string          `json:"kind"`
	Version   string          `json:"version"`
	ID        string          `json:"id"`
	Tool      *struct{ Name string } `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Deadline  *int64          `json:"deadline_ms"`
	Limits    *struct {
		MaxResultBytes int64 `json:"max_result_bytes"`
	} `json:"limits"`
	Context *struct {
		IdempotencyKey string `json:"idempotency_key"`
	} `json:"context"`
	Extensions map[string]json.RawMessage `json:"extensions"`
}

type tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
	Effects     string         `json:"effects"`
	arg         string
	maxLength   int
	run         func(arg string, req *request) (map[string]any, *refusal)
}

func stringArg(name string, maxLength int) map[string]any {
	return map[string]any{
		"type":                 "object",
		"properties":           map[string]any{name: map[string]any{"type": "string", "maxLength": maxLength}},
		"required":             []string{name},
		"additionalProperties": false,
	}
}

var tools = []*tool{
	{Name: "echo", Description: "Return the given text unchanged.", Effects: "none",
		InputSchema: stringArg("text", 65536), arg: "text", maxLength: 65536,
		run: func(text string, _ *request) (map[string]any, *refusal) {
			return map[string]any{"type": "text", "content": text}, nil
		}},
	{Name: "ledger_append", Description: "Append an entry to the ledger, at most once per idempotency key.",
		Effects: "external", InputSchema: stringArg("entry", 4096), arg: "entry", maxLength: 4096,
		run: ledgerAppend},
}

// ledgerAppend has an external effect, made idempotent: one line per key, ever.
func ledgerAppend(entry string, req *request) (map[string]any, *refusal) {
	if req.Context == nil || req.Context.IdempotencyKey == "" {
		return nil, refuse("TOOL_FAILED", "ledger_append needs context.idempotency_key")
	}
	key := req.Context.IdempotencyKey
	ledger := os.Getenv("LEDGER_FILE")
	if ledger == "" {
		ledger = filepath.Join(os.TempDir(), "ledger.jsonl")
	}
	unavailable := func(err error) *refusal {
		r := refuse("UNAVAILABLE", "the ledger cannot be used: %v", errors.Unwrap(err))
		r.Retryable = true
		return r
	}
	if existing, err := os.ReadFile(ledger); err == nil {
		for _, line := range bytes.Split(existing, []byte("\n")) {
			var record map[string]any
			if json.Unmarshal(line, &record) == nil && record["idempotency_key"] == key {
				record["appended"] = false
				return map[string]any{"type": "json", "content": record}, nil
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, unavailable(err)
	}
	record := map[string]any{"idempotency_key": key, "entry": entry}
	line, _ := json.Marshal(record)
	f, err := os.OpenFile(ledger, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, unavailable(err)
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		return nil, unavailable(err)
	}
	record["appended"] = true
	return map[string]any{"type": "json", "content": record}, nil
}

func checkRequest(req *request) *refusal {
	bad := func(why string) *refusal { return refuse("INVALID_REQUEST", "invalid ToolCallRequest: %s", why) }
	switch {
	case !idPattern.MatchString(req.ID):
		return bad("id: missing or not an identifier")
	case req.Tool == nil || !toolName.MatchString(req.Tool.Name):
		return bad("tool.name: missing or invalid")
	case len(req.Arguments) == 0 || req.Arguments[0] != '{':
		return bad("arguments: expected an object")
	case req.Deadline == nil || *req.Deadline < 0:
		return bad("deadline_ms: expected a non-negative integer")
	case req.Limits == nil || req.Limits.MaxResultBytes < 1 || req.Limits.MaxResultBytes > 64<<20:
		return bad("limits.max_result_bytes: expected an integer in 1..67108864")
	case req.Context != nil && len(req.Context.IdempotencyKey) > 256*4:
		return bad("context.idempotency_key: longer than 256 characters")
	}
	// Section 3.1: the extensions' namespace is closed, their content open.
	for key := range req.Extensions {
		if len(key) > 1024 || !extensionKey.MatchString(key) {
			return bad(fmt.Sprintf("extensions: key %q is not vendor.domain/name", truncate(key, 64)))
		}
	}
	return nil
}

func checkArguments(t *tool, raw json.RawMessage) (string, *refusal) {
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return "", refuse("INVALID_ARGUMENTS", "arguments: expected an object")
	}
	for name := range args {
		if name != t.arg {
			return "", refuse("INVALID_ARGUMENTS", "arguments: unexpected property %q", truncate(name, 64))
		}
	}
	value, present := args[t.arg]
	if !present {
		return "", refuse("INVALID_ARGUMENTS", "arguments: %q is required", t.arg)
	}
	text, ok := value.(string)
	if !ok {
		return "", refuse("INVALID_ARGUMENTS", "arguments['%s']: the value is not of type 'string'", t.arg)
	}
	if utf8.RuneCountInString(text) > t.maxLength {
		return "", refuse("INVALID_ARGUMENTS", "arguments['%s']: longer than %d characters", t.arg, t.maxLength)
	}
	return text, nil
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}

// handle answers one request; the bool says whether the answer is an error.
func handle(data []byte) (any, bool) {
	id, version := reservedID, "1.0"
	fail := func(r *refusal) (any, bool) {
		r.Message = truncate(r.Message, 4096)
		return map[string]any{"kind": "ToolCallResult", "version": version, "id": id,
			"status": "error", "error": r}, true
	}
	if err := strictCheck(data); err != nil {
		return fail(err.(*refusal))
	}
	var probe map[string]any
	_ = json.Unmarshal(data, &probe)
	if s, ok := probe["id"].(string); ok && idPattern.MatchString(s) {
		id = s
	}
	kind, _ := probe["kind"].(string)
	if kind != "ToolCallRequest" && kind != "DescribeRequest" {
		return fail(refuse("INVALID_REQUEST", "kind: expected ToolCallRequest or DescribeRequest"))
	}
	v, ok := probe["version"].(string)
	if !ok || !versionPattern.MatchString(v) {
		return fail(refuse("INVALID_REQUEST", "version: missing or not a version (major.minor, no leading zeros)"))
	}
	if v != supported[0] {
		return fail(refuse("UNSUPPORTED_VERSION", "version %q is not supported; supported versions: %s",
			truncate(v, 16), strings.Join(supported, ", ")))
	}
	version = v
	if kind == "DescribeRequest" {
		return map[string]any{"kind": "DescribeResult", "version": version,
			"worker":             map[string]string{"name": "example-go", "version": "1.0.0"},
			"supported_versions": supported, "tools": tools}, false
	}
	var req request
	if err := json.Unmarshal(data, &req); err != nil {
		return fail(refuse("INVALID_REQUEST", "invalid ToolCallRequest: a field has the wrong type"))
	}
	if r := checkRequest(&req); r != nil {
		return fail(r)
	}
	logf("call %s: tool %s", id, req.Tool.Name)
	var chosen *tool
	for _, t := range tools {
		if t.Name == req.Tool.Name {
			chosen = t
		}
	}
	if chosen == nil {
		return fail(refuse("UNKNOWN_TOOL", "no tool %q; this worker has: echo, ledger_append", req.Tool.Name))
	}
	arg, r := checkArguments(chosen, req.Arguments)
	if r != nil {
		return fail(r)
	}
	if time.Now().UnixMilli() >= *req.Deadline {
		r := refuse("DEADLINE_EXCEEDED", "the deadline passed before the tool ran")
		r.Retryable = true
		return fail(r)
	}
	output, r := chosen.run(arg, &req)
	if r != nil {
		return fail(r)
	}
	result := map[string]any{"kind": "ToolCallResult", "version": version, "id": id,
		"status": "ok", "output": output}
	if size := len(encode(result)); int64(size) > req.Limits.MaxResultBytes {
		return fail(refuse("LIMIT_EXCEEDED", "result is %d bytes, over max_result_bytes=%d",
			size, req.Limits.MaxResultBytes))
	}
	return result, false
}

func encode(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func main() {
	data, err := io.ReadAll(io.LimitReader(bufio.NewReader(os.Stdin), maxRequestBytes+1))
	answer, failed := handle(data)
	if err != nil {
		answer, failed = map[string]any{"kind": "ToolCallResult", "version": "1.0", "id": reservedID,
			"status": "error", "error": refuse("INVALID_REQUEST", "cannot read stdin")}, true
	} else if len(data) > maxRequestBytes {
		answer, failed = map[string]any{"kind": "ToolCallResult", "version": "1.0", "id": reservedID,
			"status": "error", "error": refuse("INVALID_REQUEST", "request over 16 MiB")}, true
	}
	os.Stdout.Write(encode(answer))
	if failed {
		os.Exit(1)
	}
}
