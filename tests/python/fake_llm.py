"""A scripted fake LLM upstream for the agent tests: the Anthropic Messages API (`POST /v1/messages`), OpenAI chat
completions (`POST /v1/chat/completions`), OpenAI Responses (`POST /v1/responses`) and Google's Gemini API
(`POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`, `:countTokens`; the key must be
`x-goog-api-key: fake-gemini-key`, else 401 as Google answers), plain and streamed, each in its own wire format,
plus `GET /v1/models` and `GET /v1beta/models` for probes.

The "model" is a script, so an agent's tool round trip can be tested offline:
- when the conversation ends with a tool result, it answers `The tool said: <result>`;
- else, when the last user text names a file ending in `hello.txt` and tools are offered, it calls one: `Read`
  (`file_path`) when offered, else `exec_command` (`cmd: cat <file>`), else the first tool with `{"city": "Paris"}`;
- else it answers `Hello from the fake upstream.`
`POST /v1/messages/count_tokens` answers `{"input_tokens": 123}`.

Usage: Messages report 100 input, 40 cache-read and 7 output tokens; chat and Responses 100 input and 7 output.
With `--metered` it bills as a real provider does instead: the input by its size (a token per 4 bytes of the
fields that make the input, as compact JSON), which `POST /v1/messages/count_tokens` and
`POST /v1/responses/input_tokens` count alike, and 300 output tokens, never more than the request's cap.
Every request is recorded (`GET /requests` lists method, path, headers, body). Run: `python3 fake_llm.py`; it
prints `fake_llm listening on http://127.0.0.1:PORT` on stderr and serves until killed.
"""

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECORDED = []
LOCK = threading.Lock()
METERED = "--metered" in sys.argv
METERED_OUTPUT = 300
# The fields that make a request's input, per API (what the counting endpoints take, less `model`).
MESSAGES_INPUT = ("messages", "system", "tools", "tool_choice", "thinking", "mcp_servers")
RESPONSES_INPUT = ("input", "instructions", "tools", "tool_choice", "conversation", "reasoning", "text")
CHAT_INPUT = ("messages", "tools", "tool_choice")


def input_tokens(body, fields):
    """A metered request's input tokens: a token per 4 bytes of its input fields as compact JSON."""
    part = {k: body[k] for k in fields if k in body}
    return -(-len(json.dumps(part, sort_keys=True, separators=(",", ":"))) // 4)


def output_tokens(body, cap_field):
    cap = body.get(cap_field)
    return min(METERED_OUTPUT, cap) if isinstance(cap, int) else METERED_OUTPUT
GREETING = "Hello from the fake upstream."


def _text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif part.get("type") == "tool_result":
                    out.append(_text_of(part.get("content")))
        return "\n".join(out)
    return ""


def _tool_names(tools):
    names = []
    for t in tools or []:
        if not isinstance(t, dict):
            continue
        name = t.get("name") or (t.get("function") or {}).get("name")
        if name and t.get("type") in (None, "custom", "function"):
            names.append(name)
    return names


def decide(turns, tools):
    """turns: [(role, text, is_tool_result)] oldest first. Returns ("text", str) or ("tool", name, input dict)."""
    if turns and turns[-1][2]:
        return ("text", "The tool said: " + turns[-1][1].strip()[:200])
    last_user = next((t[1] for t in reversed(turns) if t[0] == "user" and not t[2]), "")
    m = re.search(r"(\S*hello\.txt)", last_user)
    names = _tool_names(tools)
    if m and names:
        path = m.group(1)
        for reader in ("Read", "read_file"):
            if reader in names:
                return ("tool", reader, {"file_path": path})
        if "exec_command" in names:
            return ("tool", "exec_command", {"cmd": f"cat {path}"})
        return ("tool", names[0], {"city": "Paris"})
    return ("text", GREETING)


GEMINI_KEY = "fake-gemini-key"


def gemini_turns(body):
    turns = []
    for c in body.get("contents", []):
        parts = c.get("parts") or []
        results = [p["functionResponse"] for p in parts if isinstance(p, dict) and "functionResponse" in p]
        if results:
            out = results[-1].get("response") or {}
            turns.append(("tool", out.get("output") if isinstance(out.get("output"), str) else json.dumps(out), True))
        else:
            role = "assistant" if c.get("role") == "model" else "user"
            # Gemini CLI's first turn opens with the workspace's tree (its `hello.txt`); the prompt is the last part.
            turns.append((role, _text_of(parts[-1:]), False))
    return turns


def gemini_tools(body):
    return [{"name": d.get("name")} for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []]


def messages_turns(body):
    turns = []
    for m in body.get("messages", []):
        content = m.get("content")
        is_result = isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        )
        turns.append((m.get("role"), _text_of(content), is_result))
    return turns


def chat_turns(body):
    # A user message of several parts ends with the prompt (Gemini CLI's, translated, opens with a workspace tree).
    last = lambda c: c[-1:] if isinstance(c, list) else c
    return [(m.get("role"), _text_of(last(m.get("content"))), m.get("role") == "tool") for m in body.get("messages", [])]


def responses_turns(body):
    items = body.get("input")
    if isinstance(items, str):
        return [("user", items, False)]
    turns = []
    for it in items or []:
        kind = it.get("type", "message")
        if kind == "message":
            turns.append((it.get("role"), _text_of(it.get("content")), False))
        elif kind == "function_call_output":
            out = it.get("output")
            turns.append(("tool", out if isinstance(out, str) else json.dumps(out), True))
    return turns


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        # One request per connection: a pooled client never reuses a connection this server is closing.
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events, named):
        out = []
        for name, data in events:
            if named:
                out.append(f"event: {name}\n")
            out.append(f"data: {json.dumps(data) if not isinstance(data, str) else data}\n\n")
        self._send(200, "".join(out).encode(), "text/event-stream")

    def do_GET(self):
        if self.path.startswith("/requests"):
            with LOCK:
                self._send(200, RECORDED)
        elif self.path.startswith("/v1beta/models"):
            self._send(200, {"models": [{"name": "models/fake"}]})
        elif self.path.startswith("/v1/models") or self.path.startswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}], "has_more": False})
        else:
            self._send(404, {"error": {"message": "no such route"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self._send(400, {"error": {"message": "invalid JSON"}})
        path = self.path.split("?")[0]
        with LOCK:
            RECORDED.append(
                {"method": "POST", "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
            )
        if path.startswith("/v1beta/models/"):
            return self.serve_gemini(path, body)
        if path.endswith("/messages/count_tokens"):
            return self._send(200, {"input_tokens": input_tokens(body, MESSAGES_INPUT) if METERED else 123})
        if path.endswith("/responses/input_tokens") and METERED:
            return self._send(200, {"object": "response.input_tokens", "input_tokens": input_tokens(body, RESPONSES_INPUT)})
        if path.endswith("/messages"):
            return self.serve_messages(body)
        if path.endswith("/chat/completions"):
            return self.serve_chat(body)
        if path.endswith("/responses"):
            return self.serve_responses(body)
        self._send(404, {"error": {"message": "no such route"}})

    def serve_messages(self, body):
        choice = decide(messages_turns(body), body.get("tools"))
        usage = {"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 40, "output_tokens": 7}
        if METERED:
            usage.update(input_tokens=input_tokens(body, MESSAGES_INPUT), cache_read_input_tokens=0,
                         output_tokens=output_tokens(body, "max_tokens"))
        if choice[0] == "text":
            block, stop = {"type": "text", "text": choice[1]}, "end_turn"
        else:
            block, stop = {"type": "tool_use", "id": "toolu_fake_1", "name": choice[1], "input": choice[2]}, "tool_use"
        message = {"id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model"), "content": [block],
                   "stop_reason": stop, "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            return self._send(200, message)
        start = dict(message, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
        events = [("message_start", {"type": "message_start", "message": start}), ("ping", {"type": "ping"})]
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))
            for piece in re.findall(r"\S+\s*", block["text"]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}))
        else:
            head = dict(block, input={})
            events.append(("content_block_start", {"type": "content_block_start", "index": 0, "content_block": head}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": usage["output_tokens"]}}))
        events.append(("message_stop", {"type": "message_stop"}))
        self._sse(events, named=True)

    def serve_gemini(self, path, body):
        if self.headers.get("x-goog-api-key") != GEMINI_KEY:
            return self._send(401, {"error": {"code": 401, "message": "API key not valid.", "status": "UNAUTHENTICATED"}})
        method = path.rsplit(":", 1)[-1]
        if method == "countTokens":
            return self._send(200, {"totalTokens": 123})
        choice = decide(gemini_turns(body), gemini_tools(body))
        usage = {"promptTokenCount": 100, "cachedContentTokenCount": 40, "candidatesTokenCount": 7, "thoughtsTokenCount": 3,
                 "totalTokenCount": 110}
        model = path.split("/models/", 1)[1].rsplit(":", 1)[0]
        if choice[0] == "text":
            parts = [{"text": choice[1]}]
        else:
            parts = [{"functionCall": {"name": choice[1], "args": choice[2]}}]
        final = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": usage, "modelVersion": model + "-001", "responseId": "fake-gemini-1"}
        if method == "generateContent":
            return self._send(200, final)
        events = []
        if choice[0] == "text":
            pieces = re.findall(r"\S+\s*", choice[1])
            for piece in pieces[:-1]:
                events.append(("", {"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}],
                                    "usageMetadata": {"promptTokenCount": 100}, "modelVersion": model + "-001"}))
            final["candidates"][0]["content"]["parts"] = [{"text": pieces[-1]}]
        events.append(("", final))
        self._sse(events, named=False)

    def serve_chat(self, body):
        choice = decide(chat_turns(body), body.get("tools"))
        usage = {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107}
        if METERED:
            cap = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
            i, o = input_tokens(body, CHAT_INPUT), output_tokens(body, cap)
            usage = {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o}
        if choice[0] == "text":
            message, finish = {"role": "assistant", "content": choice[1]}, "stop"
        else:
            call = {"id": "call_fake_1", "type": "function", "function": {"name": choice[1], "arguments": json.dumps(choice[2])}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        base = {"id": "chatcmpl-fake", "created": 1700000000, "model": body.get("model")}
        if not body.get("stream"):
            return self._send(200, dict(base, object="chat.completion", choices=[{"index": 0, "message": message, "finish_reason": finish}], usage=usage))
        chunk = lambda delta, fin=None: dict(base, object="chat.completion.chunk", choices=[{"index": 0, "delta": delta, "finish_reason": fin}])
        events = [("", chunk({"role": "assistant", "content": ""}))]
        if finish == "stop":
            for piece in re.findall(r"\S+\s*", message["content"]):
                events.append(("", chunk({"content": piece})))
        else:
            c = message["tool_calls"][0]
            events.append(("", chunk({"tool_calls": [{"index": 0, "id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": ""}}]})))
            events.append(("", chunk({"tool_calls": [{"index": 0, "function": {"arguments": c["function"]["arguments"]}}]})))
        events.append(("", chunk({}, finish)))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(("", dict(base, object="chat.completion.chunk", choices=[], usage=usage)))
        events.append(("", "[DONE]"))
        self._sse(events, named=False)

    def serve_responses(self, body):
        choice = decide(responses_turns(body), body.get("tools"))
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 7,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 107}
        if METERED:
            i, o = input_tokens(body, RESPONSES_INPUT), output_tokens(body, "max_output_tokens")
            usage.update(input_tokens=i, output_tokens=o, total_tokens=i + o)
        if choice[0] == "text":
            item = {"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": choice[1], "annotations": []}]}
        else:
            item = {"type": "function_call", "id": "fc_fake", "status": "completed", "call_id": "call_fake_1",
                    "name": choice[1], "arguments": json.dumps(choice[2])}
        resp = lambda status, output, u: {"id": "resp_fake", "object": "response", "created_at": 1700000000, "status": status,
                                          "error": None, "incomplete_details": None, "model": body.get("model"), "output": output,
                                          "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": u}
        if not body.get("stream"):
            return self._send(200, resp("completed", [item], usage))
        events = [("response.created", {"response": resp("in_progress", [], None)}),
                  ("response.in_progress", {"response": resp("in_progress", [], None)})]
        if item["type"] == "message":
            added = dict(item, status="in_progress", content=[])
            events.append(("response.output_item.added", {"output_index": 0, "item": added}))
            events.append(("response.content_part.added", {"item_id": "msg_fake", "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}))
            for piece in re.findall(r"\S+\s*", choice[1]):
                events.append(("response.output_text.delta", {"item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": piece}))
            events.append(("response.output_text.done", {"item_id": "msg_fake", "output_index": 0, "content_index": 0, "text": choice[1]}))
            events.append(("response.content_part.done", {"item_id": "msg_fake", "output_index": 0, "content_index": 0, "part": item["content"][0]}))
        else:
            events.append(("response.output_item.added", {"output_index": 0, "item": dict(item, status="in_progress", arguments="")}))
            events.append(("response.function_call_arguments.delta", {"item_id": "fc_fake", "output_index": 0, "delta": item["arguments"]}))
            events.append(("response.function_call_arguments.done", {"item_id": "fc_fake", "output_index": 0, "arguments": item["arguments"]}))
        events.append(("response.output_item.done", {"output_index": 0, "item": item}))
        events.append(("response.completed", {"response": resp("completed", [item], usage)}))
        numbered = []
        for i, (name, data) in enumerate(events):
            numbered.append((name, dict(data, type=name, sequence_number=i)))
        self._sse(numbered, named=True)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"fake_llm listening on http://127.0.0.1:{server.server_address[1]}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
