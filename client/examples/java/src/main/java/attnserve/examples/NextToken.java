package attnserve.examples;

import attnserve.v1.InferenceGrpc;
import attnserve.v1.InferenceGrpc.InferenceBlockingStub;
import attnserve.v1.InferenceOuterClass.GenerateRequest;
import attnserve.v1.InferenceOuterClass.GenerateResponse;
import attnserve.v1.InferenceOuterClass.NextTokenRequest;
import attnserve.v1.InferenceOuterClass.NextTokenResponse;
import attnserve.v1.InferenceOuterClass.Sequence;
import attnserve.v1.InferenceOuterClass.TokenProbability;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Prints the most probable next tokens after a text, then streams a sampled continuation.
 *
 * <p>Build with {@code mvn package} (the stubs are generated from the repository's proto/), then
 * run {@code java -jar target/next-token.jar --text "Once upon a time"}.
 */
public final class NextToken {
  private static final int TOP_K = 5;
  private static final int MAX_TOKENS = 40;
  private static final float TEMPERATURE = 0.8f;
  private static final long SEED = 1; // the same seed gives the same continuation
  private static final long TIMEOUT_SECONDS = 30;
  private static final String USAGE =
      "usage: next-token [--target HOST:PORT] [--model MODEL] [--text TEXT]";

  // UTF-8 whatever the locale, like the other examples.
  private static final PrintStream out =
      new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
  private static final PrintStream err =
      new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8);

  public static void main(String[] args) throws InterruptedException {
    Map<String, String> flags = parseFlags(args);
    ManagedChannel channel =
        Grpc.newChannelBuilder(flags.get("target"), InsecureChannelCredentials.create()).build();
    boolean failed = false;
    try {
      InferenceBlockingStub stub = InferenceGrpc.newBlockingStub(channel);
      // A server started with --api_key wants the key with every call.
      String key = System.getenv("ATTNSERVE_API_KEY");
      if (key != null && !key.isEmpty()) {
        Metadata headers = new Metadata();
        headers.put(
            Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER), "Bearer " + key);
        stub = stub.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers));
      }
      run(stub, flags.get("model"), flags.get("text"));
    } catch (StatusRuntimeException e) {
      // e.g. NOT_FOUND for an unknown model, UNAVAILABLE if no server
      Status status = e.getStatus();
      err.println("error: " + status.getCode() + ": " + status.getDescription());
      failed = true;
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
    if (failed) {
      System.exit(1);
    }
  }

  private static void run(InferenceBlockingStub stub, String model, String text) {
    Sequence prompt = Sequence.newBuilder().setText(text).build();

    NextTokenResponse reply =
        stub.withDeadlineAfter(TIMEOUT_SECONDS, TimeUnit.SECONDS)
            .nextToken(
                NextTokenRequest.newBuilder()
                    .setModel(model)
                    .addSequences(prompt)
                    .setTopK(TOP_K)
                    .build());
    out.println("Top " + TOP_K + " next tokens after " + quote(text) + ":");
    out.println(String.format(Locale.ROOT, "%5s  %s  probability", "id", pad("token", 10)));
    // One result per sequence, most probable first.
    for (TokenProbability token : reply.getResults(0).getTopList()) {
      // JSON quoting makes spaces, newlines and control bytes visible.
      out.println(
          String.format(
              Locale.ROOT,
              "%5d  %s  %s",
              token.getId(),
              pad(quote(token.getText()), 10),
              sixDecimals(token.getProbability())));
    }

    out.println();
    out.println(
        "Generating " + MAX_TOKENS + " tokens (temperature " + TEMPERATURE + ", seed " + SEED
            + "):");
    out.print(text);
    out.flush();
    GenerateRequest request =
        GenerateRequest.newBuilder()
            .setModel(model)
            .setPrompt(prompt)
            .setMaxTokens(MAX_TOKENS)
            .setTemperature(TEMPERATURE)
            .setSeed(SEED)
            .build();
    // Tokens arrive as they are sampled; the last message says why generation stopped.
    Iterator<GenerateResponse> events =
        stub.withDeadlineAfter(TIMEOUT_SECONDS, TimeUnit.SECONDS).generate(request);
    while (events.hasNext()) {
      GenerateResponse event = events.next();
      switch (event.getEventCase()) {
        case TOKEN -> {
          out.print(event.getToken().getText());
          out.flush();
        }
        case FINISH -> out.println("\nfinish reason: " + event.getFinish().getReason());
        default -> {}
      }
    }
  }

  /** --target, --model and --text, as {@code --flag value} or {@code --flag=value}. */
  private static Map<String, String> parseFlags(String[] args) {
    Map<String, String> flags = new LinkedHashMap<>();
    flags.put("target", "localhost:50051");
    flags.put("model", "demo");
    flags.put("text", "The meaning of life is");
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("-h") || args[i].equals("--help")) {
        out.println(USAGE);
        System.exit(0);
      }
      String[] nameValue = args[i].split("=", 2);
      String name = nameValue[0].startsWith("--") ? nameValue[0].substring(2) : "";
      if (!flags.containsKey(name) || (nameValue.length == 1 && i + 1 == args.length)) {
        err.println(USAGE);
        System.exit(2);
      }
      flags.put(name, nameValue.length == 2 ? nameValue[1] : args[++i]);
    }
    return flags;
  }

  /** JSON quoting as Python's json.dumps(text, ensure_ascii=False) does it: non-ASCII stays. */
  static String quote(String text) {
    StringBuilder quoted = new StringBuilder("\"");
    text.codePoints()
        .forEach(
            c -> {
              switch (c) {
                case '"' -> quoted.append("\\\"");
                case '\\' -> quoted.append("\\\\");
                case '\n' -> quoted.append("\\n");
                case '\r' -> quoted.append("\\r");
                case '\t' -> quoted.append("\\t");
                case '\b' -> quoted.append("\\b");
                case '\f' -> quoted.append("\\f");
                default -> {
                  if (c < 0x20) {
                    quoted.append(String.format(Locale.ROOT, "\\u%04x", c));
                  } else {
                    quoted.appendCodePoint(c);
                  }
                }
              }
            });
    return quoted.append('"').toString();
  }

  /** Left-aligns text in a column of {@code width} characters (code points, as Python counts). */
  private static String pad(String text, int width) {
    return text + " ".repeat(Math.max(0, width - text.codePointCount(0, text.length())));
  }

  /** Six decimals, rounded as C's printf and Python round: half to even, from the exact value. */
  private static String sixDecimals(float value) {
    return new BigDecimal(value).setScale(6, RoundingMode.HALF_EVEN).toPlainString();
  }
}
