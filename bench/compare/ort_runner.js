// ONNX Runtime's side of the comparison suite: the same model directory, checks and cases as
// engine_runner (see bench/engine_runner.cc), through onnxruntime-node's CPU provider.
//
// Usage: node ort_runner.js MODEL_DIR [--runs N] [--cases prefill:1x128,decode:512,...]
//                                     [--threads 2] [--model model.onnx] [--tolerance 1e-3]
//   (--model: another graph of the directory, e.g. bench/int8_compare.py's int8 quantization;
//   --tolerance: the check's largest error, relative to the largest logit)
// Prints {"case": median ms, ...}; the check's result goes to stderr.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

function parseArguments(argv) {
  const options = {runs: 10, cases: '', threads: 2, model: 'model.onnx', tolerance: 1e-3};
  const [directory, ...rest] = argv;
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, '');
    if (!(key in options)) throw new Error(`unknown flag ${rest[i]}`);
    options[key] = key === 'cases' || key === 'model' ? rest[i + 1] : Number(rest[i + 1]);
  }
  if (!directory) throw new Error('usage: ort_runner.js MODEL_DIR [--runs N] [--cases ...]');
  return {directory, ...options};
}

async function medianMs(runs, fn) {
  for (let i = 0; i < 2; ++i) await fn();  // warm-up, as engine_runner
  const times = [];
  for (let i = 0; i < runs; ++i) {
    const start = process.hrtime.bigint();
    await fn();
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)];
}

// A deterministic normal(0, 1) source (Box-Muller over a 32-bit LCG).
function normals(count, seed = 7) {
  let state = seed >>> 0;
  const uniform = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state + 1) / 4294967297;
  };
  const values = new Float32Array(count);
  for (let i = 0; i < count; ++i) {
    values[i] = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
  }
  return values;
}

function tokens(batch, length) {
  const ids = new BigInt64Array(batch * length);
  for (let i = 0; i < ids.length; ++i) ids[i] = BigInt((i * 7919 + 13) % 256);
  return new ort.Tensor('int64', ids, [batch, length]);
}

function readFloats(file) {
  const bytes = fs.readFileSync(file);
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
}

let tolerance = 1e-3;

function checkClose(actual, expected, what) {
  if (actual.length !== expected.length) {
    throw new Error(`${what}: ${actual.length} values, the reference has ${expected.length}`);
  }
  let largest = 1, worst = 0;
  for (let i = 0; i < expected.length; ++i) {
    largest = Math.max(largest, Math.abs(expected[i]));
    worst = Math.max(worst, Math.abs(actual[i] - expected[i]));
  }
  if (!(worst <= tolerance * largest)) {
    throw new Error(`${what} differs from the reference by ${worst} (max |expected| ${largest})`);
  }
  console.error(`${what} matches the reference: max |diff| ${worst}`);
}

// A causal LM's graph: ids and per-layer past keys and values in, logits and presents out.
class CachedLM {
  constructor(session, config) {
    this.session = session;
    this.config = config;
  }

  emptyPast(batch) {
    const c = this.config, past = {};
    for (let i = 0; i < c.num_layers; ++i) {
      past[`past_key_${i}`] = new ort.Tensor('float32', new Float32Array(0),
                                             [batch, c.num_kv_heads || c.num_heads, 0, c.head_dim_qk]);
      past[`past_value_${i}`] = new ort.Tensor('float32', new Float32Array(0),
                                               [batch, c.num_kv_heads || c.num_heads, 0, c.head_dim_v]);
    }
    return past;
  }

  // Runs ids after `past`; returns {logits, past} with the presents as the next call's past.
  async advance(ids, past) {
    const out = await this.session.run({ids, ...past});
    const next = {};
    for (let i = 0; i < this.config.num_layers; ++i) {
      next[`past_key_${i}`] = out[`present_key_${i}`];
      next[`past_value_${i}`] = out[`present_value_${i}`];
    }
    return {logits: out.logits, past: next};
  }
}

async function check(model, config, directory) {
  const spec = JSON.parse(fs.readFileSync(path.join(directory, 'check.json')));
  const expected = readFloats(path.join(directory, 'check_output.bin'));
  if (model instanceof CachedLM) {
    const ids = new ort.Tensor('int64', BigInt64Array.from(spec.ids, BigInt),
                               [spec.batch, spec.length]);
    checkClose((await model.advance(ids, model.emptyPast(spec.batch))).logits.data, expected,
               'prefill');
    const first = new ort.Tensor('int64', BigInt64Array.from(spec.ids.slice(0, spec.length),
                                                             BigInt), [1, spec.length]);
    const {past} = await model.advance(first, model.emptyPast(1));
    const next = new ort.Tensor('int64', BigInt64Array.from([BigInt(spec.decode_token)]), [1, 1]);
    checkClose((await model.advance(next, past)).logits.data,
               readFloats(path.join(directory, 'check_decode_output.bin')), 'decode');
  } else {
    const inputs = new ort.Tensor('float32', Float32Array.from(spec.inputs),
                                  [spec.batch, spec.length, config.input_dim]);
    const lengths = new ort.Tensor('int64', new BigInt64Array(spec.batch).fill(
        BigInt(spec.length)), [spec.batch]);
    checkClose((await model.run({inputs, lengths})).output.data, expected, 'forward');
  }
}

async function timeCase(model, config, name, runs) {
  const [kind, shape] = name.split(':');
  if (kind === 'prefill') {
    const [batch, length] = shape.split('x').map(Number);
    if (model instanceof CachedLM) {
      const ids = tokens(batch, length), past = model.emptyPast(batch);
      return medianMs(runs, () => model.advance(ids, past));
    }
    const inputs = new ort.Tensor('float32', normals(batch * length * config.input_dim),
                                  [batch, length, config.input_dim]);
    const lengths = new ort.Tensor('int64', new BigInt64Array(batch).fill(BigInt(length)),
                                   [batch]);
    return medianMs(runs, () => model.run({inputs, lengths}));
  }
  if (kind !== 'decode' || !(model instanceof CachedLM)) throw new Error(`unknown case ${name}`);
  // Each timed step adds a token to the context, as in engine_runner.
  let {past} = await model.advance(tokens(1, Number(shape)), model.emptyPast(1));
  const next = tokens(1, 1);
  return medianMs(runs, async () => {
    past = (await model.advance(next, past)).past;
  });
}

async function main() {
  const options = parseArguments(process.argv.slice(2));
  tolerance = options.tolerance;
  const config = JSON.parse(fs.readFileSync(path.join(options.directory, 'config.json')));
  const session = await ort.InferenceSession.create(
      path.join(options.directory, options.model),
      {intraOpNumThreads: options.threads, interOpNumThreads: 1, executionMode: 'sequential',
       graphOptimizationLevel: 'all'});
  const model = config.architecture === 'causal_lm' ? new CachedLM(session, config) : session;
  await check(model, config, options.directory);
  const results = {};
  for (const name of options.cases.split(',').filter(Boolean)) {
    results[name] = await timeCase(model, config, name, options.runs);
    console.error(`${name}: ${results[name].toFixed(3)} ms`);
  }
  console.log(JSON.stringify(results));
}

main().catch((error) => {
  console.error(`ort_runner: ${error.message}`);
  process.exit(1);
});
