"""The chat-template engine against jinja2, as transformers sets it up, byte for byte.

Every template in templates/ (real models' chat templates, SOURCES.md) is rendered over seeded
random conversations, and hand-written edge cases cover each construct, by transformers' own
_compile_jinja_template (jinja2 3.1) and by chat_template_tool (the C++ engine). Both must
produce the same text, or both must fail; when the template raises (raise_exception), the
engine's message must contain jinja2's.

Run by ctest with CHAT_TEMPLATE_TOOL set; TZ=UTC so that strftime_now agrees.
"""

import datetime
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import jinja2
from transformers.utils.chat_template_utils import _compile_jinja_template

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
TOOL = os.environ.get("CHAT_TEMPLATE_TOOL", "chat_template_tool")
NOW = datetime.datetime(2024, 7, 26, 12, 30, 5)
NOW_UNIX = int(NOW.replace(tzinfo=datetime.timezone.utc).timestamp())
CONVERSATIONS_PER_TEMPLATE = int(os.environ.get("CONVERSATIONS_PER_TEMPLATE", "24"))

TEXTS = [
    "Hello!",
    "What is the capital of France?",
    "  padded with spaces  ",
    "line one\nline two\n\nline four",
    "",
    "naïve café — “quotes” and ‘single’ 中文 日本語 😀👍🏽",
    "Tabs\tand backslashes \\ and \"double\" and 'single' quotes",
    "Braces {{ not a tag }} {% nor this %} {# nor this #}",
    "<think>\nLet me think about it.\n</think>\n\nThe answer is 42.",
    "Ends with a newline\n",
    "Numbers 1, 2.5, -3e-5 and a URL https://example.com/a?b=c&d=e",
    "\u00a0non-breaking space and zero-width\u200bspace",
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "description": "How many days", "default": 1},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web — returns snippets",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
                "required": ["query"],
            },
        },
    },
]


def random_text(rng):
    return rng.choice(TEXTS)


def random_content(rng, as_parts):
    if as_parts:
        return [{"type": "text", "text": random_text(rng)}]
    return random_text(rng)


def random_conversation(rng, with_tools):
    messages = []
    as_parts = rng.random() < 0.15
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": random_content(rng, as_parts)})
    turns = rng.randint(1, 4)
    for turn in range(turns):
        messages.append({"role": "user", "content": random_content(rng, as_parts)})
        if with_tools and rng.random() < 0.6:
            arguments = {"location": "Paris, France", "unit": rng.choice(["celsius", "fahrenheit"])}
            call = {"name": "get_current_weather",
                    "arguments": arguments if rng.random() < 0.7 else json.dumps(arguments)}
            tool_call = {"type": "function", "function": call}
            if rng.random() < 0.5:
                tool_call["id"] = "call_%d" % turn
            messages.append({"role": "assistant", "content": rng.choice([None, "", "Let me check."])
                             if rng.random() < 0.8 else random_text(rng), "tool_calls": [tool_call]})
            messages.append({"role": "tool", "name": "get_current_weather", "tool_call_id": "call_%d" % turn,
                             "content": rng.choice(["22.5", '{"temperature": 22.5, "unit": "celsius"}', "sunny"])})
        if turn < turns - 1 or rng.random() < 0.4:
            messages.append({"role": "assistant", "content": random_content(rng, as_parts)})
    if rng.random() < 0.1:
        # Not alternating: many templates raise_exception.
        messages.append({"role": rng.choice(["user", "assistant", "system"]), "content": random_text(rng)})
    if rng.random() < 0.05:
        messages = []
    return messages


def jinja2_render(source, context):
    template = _compile_jinja_template(source)
    template.environment.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    template.globals["strftime_now"] = template.environment.globals["strftime_now"]
    # A copy: templates may change what they are given (list.pop), and the engine must get the
    # original.
    variables = json.loads(json.dumps(context))
    # What apply_chat_template passes.
    variables.setdefault("tools", None)
    variables.setdefault("documents", None)
    variables.setdefault("add_generation_prompt", False)
    try:
        return True, template.render(**variables), None
    except jinja2.exceptions.TemplateError as error:
        kind = "raise" if type(error) is jinja2.exceptions.TemplateError else "template"
        return False, str(error), kind
    except Exception as error:  # noqa: BLE001 - any failure must be a failure in both
        return False, "%s: %s" % (type(error).__name__, error), "other"


class Tool:
    def __init__(self):
        self.process = subprocess.Popen([TOOL, "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, encoding="utf-8")

    def render(self, request):
        self.process.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("chat_template_tool exited")
        return json.loads(line)

    def close(self):
        self.process.stdin.close()
        self.process.wait()


# Templates with constructs the engine refuses at parse time (docs/chat-templates.md): their
# refusal is checked instead of their rendering.
REFUSED = {"openbmb--MiniCPM3-4B.jinja": "unsupported tag 'call'"}

STATS = {"rendered": 0, "failed in both": 0}


def compare(tool, request, source, context, label, failures):
    ok, text, kind = jinja2_render(source, context)
    answer = tool.render(request)
    if ok and answer["ok"]:
        STATS["rendered"] += 1
        if text != answer["output"]:
            failures.append("%s: outputs differ\n  jinja2: %r\n  engine: %r" % (label, text[:3000], answer["output"][:3000]))
        return True
    if not ok and not answer["ok"]:
        STATS["failed in both"] += 1
        if kind == "raise" and text not in answer["error"]:
            failures.append("%s: messages differ\n  jinja2: %s\n  engine: %s" % (label, text, answer["error"]))
        return True
    if ok:
        failures.append("%s: the engine failed where jinja2 rendered\n  engine: %s\n  jinja2: %r" % (label, answer["error"], text[:500]))
    else:
        failures.append("%s: jinja2 failed (%s) where the engine rendered %r" % (label, text, answer["output"][:500]))
    return False


EDGE_CASES = json.loads((HERE / "edge_cases.json").read_text(encoding="utf-8"))


def main():
    special_tokens = json.loads((TEMPLATES / "special_tokens.json").read_text(encoding="utf-8"))
    tool = Tool()
    failures = []
    compared = 0
    templates = sorted(TEMPLATES.glob("*.jinja"))
    for path in templates:
        source = path.read_text(encoding="utf-8")
        if path.name in REFUSED:
            answer = tool.render({"template": str(path), "context": {}, "now": NOW_UNIX})
            if answer["ok"] or REFUSED[path.name] not in answer["error"]:
                failures.append("%s: not refused with %r: %r" % (path.name, REFUSED[path.name], answer))
            continue
        rng = random.Random(path.name)
        tokens = special_tokens.get(path.name, {})
        with_tools = "tool" in source
        for index in range(CONVERSATIONS_PER_TEMPLATE):
            use_tools = with_tools and index % 3 != 0
            context = {
                "messages": random_conversation(rng, use_tools),
                "add_generation_prompt": rng.random() < 0.5,
                "bos_token": tokens.get("bos_token") or "<s>",
                "eos_token": tokens.get("eos_token") or "</s>",
            }
            if use_tools and rng.random() < 0.7:
                context["tools"] = TOOLS[: rng.randint(1, 2)]
            if rng.random() < 0.5:
                context["enable_thinking"] = rng.random() < 0.5
            request = {"template": str(path), "context": context, "now": NOW_UNIX}
            compare(tool, request, source, context, "%s #%d" % (path.name, index), failures)
            compared += 1
    for index, case in enumerate(EDGE_CASES):
        context = case.get("context", {})
        request = {"source": case["template"], "context": context, "now": NOW_UNIX}
        compare(tool, request, case["template"], context, "edge case %d %r" % (index, case["template"][:80]), failures)
        compared += 1
    tool.close()
    for failure in failures[:60]:
        print(failure)
    print("%d templates (%d refused as expected), %d conversations and %d edge cases compared "
          "(%d rendered, %d failed in both): %d differ"
          % (len(templates), len(REFUSED), compared - len(EDGE_CASES), len(EDGE_CASES),
             STATS["rendered"], STATS["failed in both"], len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
