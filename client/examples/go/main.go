// Command next_token prints the most probable next tokens after a text, then streams a sampled
// continuation, from an attnserve server.
//
// The stubs are generated from this repository's proto/ by go generate (protoc, with the two
// plugins that go.mod pins as tools). Build and run:
//
//	go generate && go build -o bin/next_token . && bin/next_token --text "Once upon a time"
package main

//go:generate go build -o bin/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc
//go:generate protoc -I ../../../proto --plugin=bin/protoc-gen-go --plugin=bin/protoc-gen-go-grpc --go_out=. --go-grpc_out=. --go_opt=module=attnserve.example/nexttoken --go-grpc_opt=module=attnserve.example/nexttoken --go_opt=Mattnserve/v1/inference.proto=attnserve.example/nexttoken/attnservepb --go-grpc_opt=Mattnserve/v1/inference.proto=attnserve.example/nexttoken/attnservepb attnserve/v1/inference.proto

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "attnserve.example/nexttoken/attnservepb"
)

const (
	topK        = 5
	maxTokens   = 40
	temperature = 0.8
	seed        = 1 // the same seed gives the same continuation
)

func main() {
	target := flag.String("target", "localhost:50051", "the server's host:port")
	model := flag.String("model", "demo", "the model to ask")
	text := flag.String("text", "The meaning of life is", "the text to continue")
	flag.Parse()

	if err := run(*target, *model, *text); err != nil {
		// gRPC errors carry a status, e.g. NOT_FOUND for an unknown model, UNAVAILABLE if no server.
		if s, ok := status.FromError(err); ok {
			fmt.Fprintf(os.Stderr, "error: %s: %s\n", code.Code(s.Code()), s.Message())
		} else {
			fmt.Fprintf(os.Stderr, "error: %v\n", err)
		}
		os.Exit(1)
	}
}

func run(target, model, text string) error {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := pb.NewInferenceClient(conn)
	prompt := &pb.Sequence{Input: &pb.Sequence_Text{Text: text}}

	// A server started with --api_key wants the key with every call.
	base := context.Background()
	if key := os.Getenv("ATTNSERVE_API_KEY"); key != "" {
		base = metadata.AppendToOutgoingContext(base, "authorization", "Bearer "+key)
	}
	ctx, cancel := context.WithTimeout(base, 30*time.Second)
	defer cancel()
	reply, err := client.NextToken(ctx, &pb.NextTokenRequest{
		Model: model, Sequences: []*pb.Sequence{prompt}, TopK: topK})
	if err != nil {
		return err
	}
	fmt.Printf("Top %d next tokens after %s:\n", topK, quote(text))
	fmt.Printf("%5s  %-10s  probability\n", "id", "token")
	for _, token := range reply.Results[0].Top { // one result per sequence, most probable first
		// JSON quoting makes spaces, newlines and control bytes visible. (fmt pads by runes.)
		fmt.Printf("%5d  %-10s  %.6f\n", token.Id, quote(token.Text), token.Probability)
	}

	fmt.Printf("\nGenerating %d tokens (temperature %v, seed %d):\n", maxTokens, temperature, seed)
	fmt.Print(text)
	ctx, cancel = context.WithTimeout(base, 30*time.Second)
	defer cancel()
	stream, err := client.Generate(ctx, &pb.GenerateRequest{
		Model: model, Prompt: prompt, MaxTokens: maxTokens, Temperature: temperature,
		SamplingSeed: &pb.GenerateRequest_Seed{Seed: seed}})
	if err != nil {
		return err
	}
	// Tokens arrive as they are sampled; the last message says why generation stopped.
	for {
		event, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch e := event.Event.(type) {
		case *pb.GenerateResponse_Token:
			fmt.Print(e.Token.Text)
		case *pb.GenerateResponse_Finish:
			fmt.Printf("\nfinish reason: %s\n", e.Finish.Reason)
		}
	}
}

// quote is JSON quoting as Python's json.dumps(s, ensure_ascii=False) does it: non-ASCII text
// stays as it is. (encoding/json would also escape U+2028, U+2029 and, by default, <, > and &.)
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
