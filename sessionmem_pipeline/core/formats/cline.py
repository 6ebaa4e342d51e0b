"""Cline and Roo Code tasks: `<extension storage>/tasks/<task id>/api_conversation_history.json` (+ `ui_messages.json`).

`api_conversation_history.json` is the Anthropic-style message list the extension sends: `{role, content, ts?}`
with content a string or blocks (`text`, `image`, `tool_use`, `tool_result`, `thinking`).
- Assistant: text is the reply; `<thinking>` in text and `thinking` blocks are thinking; tools are `tool_use`
  blocks (native tool calling) or, in older versions, XML in the text (`<read_file><path>…</path></read_file>`).
  The talking tools (`attempt_completion`, `ask_followup_question`, `plan_mode_respond`) are the reply's words.
- User: `<task>`, `<feedback>`, `<answer>` and `<user_message>` text is what the person wrote; `[tool] Result:` text
  and `tool_result` blocks fill the previous reply's open tool calls; `<environment_details>` is dropped (counted);
  any other text (attached files, reminders the extension adds) is one kind=injected message.
Timestamps: the message's `ts` (ms) when present; else the n-th user message (and the reply after it) takes the
time of the n-th `api_req_started` entry of `ui_messages.json`.

Identity: session_id = `cline/<task id>` or `roo/<task id>` (the task folder's name; Roo Code when the path holds
its extension id); message_id = `M<n>`, the message's 1-based position in the list; project = the last component
of the working directory the extension reports in `<environment_details>`, else the folder rule.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import PurePath
from typing import Any

from sessionmem_pipeline.core.formats.drafts import (
    CallBook,
    DraftCall,
    DraftMessage,
    SessionDraft,
    as_dict,
    as_int,
    as_list,
    as_str,
    build_result,
    placeholder,
)
from sessionmem_pipeline.core.formats.gemini import decode_json
from sessionmem_pipeline.core.formats.registry import FormatError, Related
from sessionmem_pipeline.core.formats.source import FileContext, parse_timestamp
from sessionmem_pipeline.core.models import KIND_INJECTED, ParseResult, ParseWarning

FORMAT = "cline"
ROO_STORAGE = "rooveterinaryinc.roo-cline"
PERSON_TAGS = ("task", "feedback", "answer", "user_message")
PERSON_TEXT = re.compile(r"<(?P<tag>task|feedback|answer|user_message)>\s*(?P<text>.*?)\s*</(?P=tag)>", re.DOTALL)
ENVIRONMENT = re.compile(r"<environment_details>.*?(?:</environment_details>|$)", re.DOTALL)
WORKING_DIRECTORY = re.compile(r"# Current Working Directory \((?P<cwd>[^)]+)\)")
TOOL_RESULT = re.compile(r"^\[(?P<tool>[\w-]+)[^\]\n]*\] Result:", re.MULTILINE)
THINKING = re.compile(r"<thinking>(?P<text>.*?)</thinking>", re.DOTALL)
XML_TOOLS = (
    "read_file write_to_file replace_in_file apply_diff insert_content search_and_replace execute_command "
    "search_files list_files list_code_definition_names codebase_search browser_action use_mcp_tool "
    "access_mcp_resource new_task switch_mode fetch_instructions web_fetch load_mcp_documentation "
    "attempt_completion ask_followup_question plan_mode_respond"
).split()
XML_TOOL = re.compile(r"<(?P<name>" + "|".join(XML_TOOLS) + r")>(?P<body>.*?)</(?P=name)>", re.DOTALL)
XML_PARAM = re.compile(r"<(?P<key>\w+)>\n?(?P<value>.*?)\n?</(?P=key)>", re.DOTALL)
TALKING_TOOLS = {"attempt_completion": "result", "ask_followup_question": "question", "plan_mode_respond": "response"}


def parse(ctx: FileContext, data: bytes, related: Related) -> ParseResult:
    history = decode_json(data)
    if not isinstance(history, list):
        raise FormatError("unknown format", f"{ctx.path}: expected the JSON array of a task's API messages")
    task_folder = PurePath(ctx.path).parent
    times = _request_times(related.read(str(task_folder / "ui_messages.json")))
    task = _Task(ctx)
    for position, item in enumerate(history, start=1):
        obj = as_dict(item)
        role = obj.get("role")
        if role not in ("user", "assistant"):
            task.warnings.append(ParseWarning(ctx.path, 0, f"messages[{position - 1}]: unknown role {role!r}; skipped"))
            continue
        if role == "user":
            task.requests += 1
        timestamp = parse_timestamp(obj.get("ts"))
        if timestamp is None and 0 < task.requests <= len(times):
            timestamp = times[task.requests - 1]
        (task.user if role == "user" else task.assistant)(f"M{position}", obj.get("content"), timestamp)
    prefix = "roo" if ROO_STORAGE in PurePath(ctx.path).parts else "cline"
    session = SessionDraft(f"{prefix}/{task_folder.name}", ctx.project(task.cwd), task.messages, cwd=task.cwd)
    return build_result(ctx.path, FORMAT if prefix == "cline" else "roo_code", [session], task.warnings, task.skipped)


def _request_times(data: bytes | None) -> list[Any]:
    """Times of the API requests the UI logged (`say: api_req_started`), in order."""
    if data is None:
        return []
    try:
        entries = decode_json(data)
    except FormatError:
        return []
    return [
        parse_timestamp(entry.get("ts"))
        for entry in map(as_dict, as_list(entries))
        if entry.get("say") == "api_req_started" and as_int(entry.get("ts")) is not None
    ]


class _Task:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.messages: list[DraftMessage] = []
        self.warnings: list[ParseWarning] = []
        self.skipped: Counter[str] = Counter()
        self.calls = CallBook()
        self.open_calls: list[DraftCall] = []  # the last reply's calls, for `[tool] Result:` text in call order
        self.cwd: str | None = None
        self.requests = 0

    def assistant(self, message_id: str, content: Any, timestamp: Any) -> None:
        message = DraftMessage(message_id, "assistant", 0, timestamp)
        self.open_calls = []
        for block in _blocks(content):
            kind = block.get("type")
            if kind == "text":
                self._assistant_text(message, as_str(block.get("text")) or "")
            elif kind in ("thinking", "reasoning"):
                message.thinking.append(as_str(block.get("thinking")) or as_str(block.get("text")) or "")
            elif kind == "tool_use":
                name = as_str(block.get("name")) or "unknown"
                self._tool(message, name, as_dict(block.get("input")), as_str(block.get("id")))
        self.messages.append(message)

    def _assistant_text(self, message: DraftMessage, text: str) -> None:
        message.thinking.extend(match.group("text").strip() for match in THINKING.finditer(text))
        text = THINKING.sub("", text)
        for match in XML_TOOL.finditer(text):
            params = {m.group("key"): m.group("value") for m in XML_PARAM.finditer(match.group("body"))}
            self._tool(message, match.group("name"), params, None)
        message.texts.append(XML_TOOL.sub("", text).strip())

    def _tool(self, message: DraftMessage, name: str, params: dict[str, Any], call_id: str | None) -> None:
        said = TALKING_TOOLS.get(name)
        if said and isinstance(params.get(said), str):
            message.texts.append(params[said])
            return
        call = DraftCall(name, params, call_id)
        message.calls.append(call)
        self.calls.add(call)
        self.open_calls.append(call)

    def user(self, message_id: str, content: Any, timestamp: Any) -> None:
        person: list[str] = []
        injected: list[str] = []
        for block in _blocks(content):
            kind = block.get("type")
            if kind == "tool_result":
                output = _result_text(block.get("content"))
                if not self.calls.resolve(as_str(block.get("tool_use_id")), output, block.get("is_error") is True):
                    self._resolve_next(output)
            elif kind == "text":
                self._user_text(as_str(block.get("text")) or "", person, injected)
            elif kind == "image":
                person.append(placeholder("image", as_str(as_dict(block.get("source")).get("media_type"))))
        if person:
            self.messages.append(DraftMessage(message_id, "user", 0, timestamp, texts=person))
        if injected:
            suffix = "/context" if person else ""
            self.messages.append(DraftMessage(message_id + suffix, "user", 0, timestamp, KIND_INJECTED, texts=injected))

    def _user_text(self, text: str, person: list[str], injected: list[str]) -> None:
        cwd = WORKING_DIRECTORY.search(text)
        if cwd:
            self.cwd = self.cwd or cwd.group("cwd").strip()
        without_environment = ENVIRONMENT.sub("", text)
        if without_environment != text:
            self.skipped["environment details"] += 1
        said = [match.group("text") for match in PERSON_TEXT.finditer(without_environment)]
        rest = PERSON_TEXT.sub("", without_environment).strip()
        person.extend(said)
        if TOOL_RESULT.match(rest):
            self._resolve_next(rest)
        elif rest:
            injected.append(rest)

    def _resolve_next(self, output: str) -> None:
        """A result given as text: it answers the first still-open call of the reply before it."""
        call = next((c for c in self.open_calls if c.output is None), None)
        if call is None:
            self.skipped["tool result without a call"] += 1
            return
        call.output = output


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [as_dict(block) for block in as_list(content)]


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(as_str(as_dict(part).get("text")) or "" for part in as_list(content))
