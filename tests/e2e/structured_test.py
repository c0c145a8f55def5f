"""Structured outputs end to end, on the demo model (random weights, a byte vocabulary): whatever
the model would say, the answer matches its constraint. Random JSON schemas of the subset
docs/structured-outputs.md lists, validated with the jsonschema package, at temperature 1 and
greedy; regexes, grammars and choices over the OpenAI API and attnserve.v1; and the hostile side:
malformed and oversized constraints refused with the field named, costly ones bounded, the server
up throughout."""
import http.client
import json
import random
import re
import time
import unittest

import jsonschema

from server_harness import Server, free_port, pb

MODEL = "demo"


def random_schema(rng, depth=0):
    """A JSON schema of the supported subset whose answers are bounded in size."""
    kinds = ["string", "integer", "boolean", "null", "enum", "const", "pattern", "format",
             "number"]
    if depth < 2:
        kinds += ["object", "array", "anyOf", "ref"]
    kind = rng.choice(kinds)
    if kind == "string":
        low = rng.randint(0, 3)
        return {"type": "string", "minLength": low, "maxLength": low + rng.randint(0, 6)}
    if kind == "integer":
        low = rng.randint(-1000, 1000)
        return {"type": "integer", "minimum": low, "maximum": low + rng.randint(0, 5000)}
    if kind == "number":
        return {"type": "number", "minimum": -10, "maximum": 10}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "null":
        return {"type": "null"}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", 7, None, True, "a\"b"], 3)}
    if kind == "const":
        return {"const": rng.choice(["fixed", 42, False])}
    if kind == "pattern":
        return {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2,4}$"}
    if kind == "format":
        return {"type": "string", "format": rng.choice(["date", "uuid", "email"]),
                "maxLength": 40}
    if kind == "array":
        low = rng.randint(0, 2)
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": low,
                "maxItems": low + rng.randint(0, 3)}
    if kind == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1), random_schema(rng, depth + 1)]}
    if kind == "ref":
        return {"$ref": "#/$defs/shared"}
    names = rng.sample(["id", "name", "tags", "score", "ok", "kind", "note"], rng.randint(1, 4))
    properties = {name: random_schema(rng, depth + 1) for name in names}
    return {"type": "object", "properties": properties,
            "required": [n for n in names if rng.random() < 0.7],
            "additionalProperties": False}


class StructuredTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.http_port = free_port()
        cls.server = Server(f"--http_port={cls.http_port}")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def post(self, path, body):
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=120)
        try:
            connection.request("POST", path, json.dumps(body),
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    def complete(self, **fields):
        status, answer = self.post("/v1/completions",
                                   {"model": MODEL, "prompt": "Answer: ", "max_tokens": 300,
                                    **fields})
        self.assertEqual(status, 200, answer)
        return answer["choices"][0]

    def refused(self, path="/v1/completions", **fields):
        prompt = {} if "messages" in fields else {"prompt": "x"}
        status, answer = self.post(path, {"model": MODEL, **prompt, **fields})
        self.assertEqual(status, 400, answer)
        return answer["error"]

    def test_random_schemas_are_always_answered_with_json_that_validates(self):
        rng = random.Random(43)
        shared = {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0,
                                                         "maximum": 9}},
                  "required": ["x"], "additionalProperties": False}
        for case in range(24):
            schema = {**random_schema(rng), "$defs": {"shared": shared}}
            for temperature in (1.0, 0.0):
                with self.subTest(case=case, temperature=temperature, schema=schema):
                    choice = self.complete(
                        temperature=temperature, seed=case,
                        response_format={"type": "json_schema",
                                         "json_schema": {"name": "case", "schema": schema}})
                    self.assertEqual(choice["finish_reason"], "stop", choice["text"])
                    jsonschema.validate(json.loads(choice["text"]), schema,
                                        format_checker=jsonschema.FormatChecker())

    def test_json_object_mode_answers_an_object(self):
        for seed in range(4):
            choice = self.complete(temperature=1.0, seed=seed,
                                   response_format={"type": "json_object"})
            if choice["finish_reason"] == "stop":
                self.assertIsInstance(json.loads(choice["text"]), dict)
            else:  # an unbounded object may run out of tokens: a prefix of one
                self.assertEqual(choice["finish_reason"], "length")
                self.assertTrue(choice["text"].startswith("{"), choice["text"])

    def test_each_dialect_of_regex_choice_and_grammar(self):
        date = r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-2][0-9]"
        for fields in ({"guided_regex": date}, {"structured_outputs": {"regex": date}}):
            choice = self.complete(temperature=1.0, seed=1, **fields)
            self.assertRegex(choice["text"], "^" + date + "$")
            self.assertEqual(choice["finish_reason"], "stop")
        colors = ["red", "green", "dark \"blue\""]
        for fields in ({"guided_choice": colors}, {"structured_outputs": {"choice": colors}}):
            for seed in range(3):
                self.assertIn(self.complete(temperature=1.0, seed=seed, **fields)["text"], colors)
        gbnf = 'root ::= "(" item ("," item){0,2} ")"\nitem ::= [a-c]+ | num\nnum ::= [0-9]{1,3}\n'
        lark = 'start: "(" item ("," item)~0..2 ")"\nitem: /[a-c]+/ | /[0-9]{1,3}/\n'
        shape = r"^\(([a-c]+|[0-9]{1,3})(,([a-c]+|[0-9]{1,3})){0,2}\)$"
        for fields in ({"grammar": gbnf}, {"guided_grammar": gbnf}, {"guided_grammar": lark}):
            for seed in range(3):
                choice = self.complete(temperature=1.0, seed=seed, **fields)
                self.assertRegex(choice["text"], shape, fields)
        # llama.cpp's json_schema field
        choice = self.complete(temperature=1.0, seed=2, json_schema={"enum": [1, 2, 3]})
        self.assertIn(json.loads(choice["text"]), [1, 2, 3])

    def test_streamed_answers_are_constrained_too(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=60)
        connection.request("POST", "/v1/completions", json.dumps(
            {"model": MODEL, "prompt": "x", "max_tokens": 100, "temperature": 1.0, "seed": 3,
             "stream": True, "guided_regex": "[a-z]{5,8}!"}))
        response = connection.getresponse()
        text, reasons = "", []
        for line in response.read().decode().splitlines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                text += choice["text"]
                reasons.append(choice["finish_reason"])
        connection.close()
        self.assertRegex(text, r"^[a-z]{5,8}!$")
        self.assertEqual(reasons[-1], "stop")

    def test_attnserve_v1_generate_takes_a_constraint(self):
        def generate(**constraint):
            text, finish = "", None
            for event in self.server.stub.Generate(pb.GenerateRequest(
                    model=MODEL, prompt=pb.Sequence(text="x"), max_tokens=200, temperature=1.0,
                    seed=5, constraint=pb.Constraint(**constraint)), timeout=60):
                if event.HasField("token"):
                    text += event.token.text
                else:
                    finish = event.finish
            return text + finish.text, finish.reason

        text, reason = generate(regex="[0-9]{4}")
        self.assertRegex(text, r"^[0-9]{4}$")
        self.assertEqual(reason, pb.FINISH_REASON_CONSTRAINT_COMPLETE)
        text, _ = generate(json_schema=json.dumps({"type": "array", "items": {"type": "boolean"},
                                                   "minItems": 1, "maxItems": 3}))
        self.assertTrue(1 <= len(json.loads(text)) <= 3)
        text, _ = generate(choice=pb.Constraint.Choice(options=["alpha", "beta"]))
        self.assertIn(text, ["alpha", "beta"])
        text, _ = generate(gbnf='root ::= "<" [xyz]{3} ">"\n')
        self.assertRegex(text, r"^<[xyz]{3}>$")
        with self.assertRaises(Exception) as refused:
            generate(lark="start: (")
        self.assertIn("constraint.lark is refused", str(refused.exception))

    def test_bad_constraints_are_refused_naming_the_field(self):
        error = self.refused(response_format={"type": "json_schema",
                                              "json_schema": {"name": "x",
                                                              "schema": {"type": "nope"}}})
        self.assertEqual(error["param"], "response_format.json_schema.schema")
        error = self.refused(guided_regex="a(b")
        self.assertEqual(error["param"], "guided_regex")
        self.assertIn("unclosed group", error["message"])
        error = self.refused(grammar='root ::= "a"\nnext ::= [b\n')
        self.assertIn("line", error["message"])
        error = self.refused(guided_regex="a", guided_choice=["b"])
        self.assertIn("one constraint per request", error["message"])
        error = self.refused(response_format={"type": "xml"})
        self.assertEqual(error["param"], "response_format.type")
        error = self.refused(guided_choice=[])
        self.assertEqual(error["param"], "guided_choice")

    def test_bad_tools_are_refused_naming_the_field(self):
        weather = {"type": "function", "function": {"name": "get_weather"}}
        messages = [{"role": "user", "content": "hi"}]
        for fields, param in [({"tools": [{"type": "function"}]}, "tools[0]"),
                              ({"tools": [{"type": "function", "function": {"name": ""}}]},
                               "tools[0].function.name"),
                              ({"tools": [weather], "tool_choice": "sometimes"}, "tool_choice"),
                              ({"tools": [weather], "tool_choice": {
                                  "type": "function", "function": {"name": "nope"}}},
                               "tool_choice.function.name"),
                              ({"tool_choice": "required"}, "tool_choice"),
                              ({"tools": [weather], "tool_choice": "required",
                                "guided_regex": "a"}, "guided_regex"),
                              ({"tools": [weather], "parallel_tool_calls": "yes"},
                               "parallel_tool_calls")]:
            with self.subTest(fields=fields):
                error = self.refused("/v1/chat/completions", messages=messages, **fields)
                self.assertEqual(error["param"], param, error)

    def rss_mb(self):
        with open(f"/proc/{self.server.process.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

    def test_costly_constraints_are_bounded_and_the_server_stays_up(self):
        before = self.rss_mb()
        # Larger than --max_text_bytes allows a constraint's text: 20,000 properties, and a
        # schema of 10 MB.
        for huge in ({"type": "object", "properties": {f"p{i}": {"type": "string"}
                                                       for i in range(20000)}},
                     {"type": "string", "description": "x" * (10 << 20)}):
            error = self.refused(guided_json=huge)
            self.assertIn("more than the", error["message"])
        # 10,000 nested references and a regex that backtracking engines take exponential time
        # on: each refused or answered within seconds.
        chain = {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(10000)}}
        chain["$defs"]["d10000"] = {"type": "integer", "minimum": 0, "maximum": 9}
        chain["$ref"] = "#/$defs/d0"
        for fields in ({"guided_json": chain}, {"guided_regex": "(a+)+b"},
                       {"guided_grammar": 'start: expr\nexpr: expr "+" term | term\nterm: /[0-9]/\n'}):
            start = time.time()
            status, answer = self.post("/v1/completions",
                                       {"model": MODEL, "prompt": "x", "max_tokens": 30,
                                        "temperature": 1.0, "seed": 1, **fields})
            self.assertIn(status, (200, 400), answer)
            self.assertLess(time.time() - start, 30, fields.keys())
            if "guided_regex" in fields and status == 200:
                self.assertRegex(answer["choices"][0]["text"], r"^(a+)+b$|^a*$")
        self.assertIsNone(self.server.process.poll())
        self.assertEqual(self.complete(guided_choice=["still up"])["text"], "still up")
        self.assertLess(self.rss_mb() - before, 256, "memory stays bounded")


if __name__ == "__main__":
    unittest.main()
