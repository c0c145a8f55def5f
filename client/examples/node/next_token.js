// Prints the most probable next tokens after a text, then streams a sampled continuation.
// Setup: `npm ci` in this directory. Run: node next_token.js --text "Once upon a time"
// The proto is read at run time from this repository; ATTNSERVE_PROTO names another copy.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const TOP_K = 5;
const MAX_TOKENS = 40;
const TEMPERATURE = 0.8;
const SEED = 1; // the same seed gives the same continuation

const here = path.dirname(fileURLToPath(import.meta.url));
const PROTO = process.env.ATTNSERVE_PROTO ||
  path.join(here, '../../../proto/attnserve/v1/inference.proto');

const withDeadline = () => ({ deadline: Date.now() + 30_000 });

async function main() {
  const { values: args } = parseArgs({
    options: {
      target: { type: 'string', default: 'localhost:50051' },
      model: { type: 'string', default: 'demo' },
      text: { type: 'string', default: 'The meaning of life is' },
    },
  });
  // keepCase keeps the proto's snake_case field names; int64 as strings stays exact.
  const definition = protoLoader.loadSync(PROTO, {
    keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  const { Inference } = grpc.loadPackageDefinition(definition).attnserve.v1;
  const client = new Inference(args.target, grpc.credentials.createInsecure());
  // A server started with --api_key wants the key with every call.
  const metadata = new grpc.Metadata();
  if (process.env.ATTNSERVE_API_KEY) {
    metadata.set('authorization', `Bearer ${process.env.ATTNSERVE_API_KEY}`);
  }
  const prompt = { text: args.text };
  try {
    const nextToken = promisify(client.nextToken).bind(client);
    const reply = await nextToken({ model: args.model, sequences: [prompt], top_k: TOP_K },
      metadata, withDeadline());
    console.log(`Top ${TOP_K} next tokens after ${JSON.stringify(args.text)}:`);
    console.log(`${'id'.padStart(5)}  ${'token'.padEnd(10)}  probability`);
    for (const token of reply.results[0].top) { // one result per sequence, most probable first
      // JSON quoting makes spaces, newlines and control bytes visible.
      const text = JSON.stringify(token.text);
      console.log(`${token.id.padStart(5)}  ${text.padEnd(10)}  ${token.probability.toFixed(6)}`);
    }

    console.log(`\nGenerating ${MAX_TOKENS} tokens (temperature ${TEMPERATURE}, seed ${SEED}):`);
    process.stdout.write(args.text);
    const request = {
      model: args.model, prompt, max_tokens: MAX_TOKENS, temperature: TEMPERATURE, seed: SEED,
    };
    // Tokens arrive as they are sampled; the last message says why generation stopped.
    // (With oneofs: true, `message.event` names the field set in the proto's `event` oneof.)
    await new Promise((resolve, reject) => {
      client.generate(request, metadata, withDeadline())
        .on('data', (message) => {
          if (message.event === 'token') {
            process.stdout.write(message.token.text);
          } else {
            console.log(`\nfinish reason: ${message.finish.reason}`);
          }
        })
        .on('end', resolve)
        .on('error', reject);
    });
  } finally {
    client.close();
  }
}

try {
  await main();
} catch (error) {
  // gRPC errors carry a status (e.g. NOT_FOUND for an unknown model, UNAVAILABLE if no server).
  const status = grpc.status[error.code];
  console.error(`error: ${status ? `${status}: ${error.details}` : error.message}`);
  process.exitCode = 1;
}
