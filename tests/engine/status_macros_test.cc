#include "common/status_macros.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"

namespace attnserve {
namespace {

// An error carrying a payload, to check that what arrives is the very status that was returned.
absl::Status RichError() {
  absl::Status status = absl::DataLossError("shard 3 is truncated");
  status.SetPayload("attnserve.test/detail", absl::Cord("offset 4096"));
  return status;
}

void ExpectRichError(const absl::Status& status) {
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "shard 3 is truncated");
  EXPECT_EQ(status.GetPayload("attnserve.test/detail"), absl::Cord("offset 4096"));
  EXPECT_EQ(status, RichError());
}

// Counts its calls, so that a test can see how often the macro evaluated its argument.
struct Source {
  int calls = 0;
  absl::Status status = absl::OkStatus();
  absl::Status Status() {
    ++calls;
    return status;
  }
  absl::StatusOr<std::unique_ptr<int>> Pointer(int value) {
    ++calls;
    if (!status.ok()) return status;
    return std::make_unique<int>(value);
  }
};

// Counts copies and moves of itself.
struct Counted {
  int copies = 0;
  int moves = 0;
  Counted() = default;
  Counted(const Counted& other) : copies(other.copies + 1), moves(other.moves) {}
  Counted(Counted&& other) noexcept : copies(other.copies), moves(other.moves + 1) {}
  Counted& operator=(const Counted& other) {
    copies = other.copies + 1;
    moves = other.moves;
    return *this;
  }
  Counted& operator=(Counted&& other) noexcept {
    copies = other.copies;
    moves = other.moves + 1;
    return *this;
  }
};

absl::Status ReturnIfError(Source& source, int& reached) {
  RETURN_IF_ERROR(source.Status());
  ++reached;
  return absl::OkStatus();
}

TEST(StatusMacrosTest, ReturnIfErrorEvaluatesOnceAndPassesOk) {
  Source source;
  int reached = 0;
  EXPECT_TRUE(ReturnIfError(source, reached).ok());
  EXPECT_EQ(source.calls, 1);
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsTheStatusUnchanged) {
  Source source;
  source.status = RichError();
  int reached = 0;
  ExpectRichError(ReturnIfError(source, reached));
  EXPECT_EQ(source.calls, 1);
  EXPECT_EQ(reached, 0);
}

TEST(StatusMacrosTest, ReturnIfErrorTakesAStatusOr) {
  Source source;
  auto run = [&]() -> absl::Status {
    RETURN_IF_ERROR(source.Pointer(7));
    return absl::OkStatus();
  };
  EXPECT_TRUE(run().ok());
  source.status = RichError();
  ExpectRichError(run());
  EXPECT_EQ(source.calls, 2);
}

TEST(StatusMacrosTest, ReturnIfErrorTakesLvaluesWithoutMovingFromThem) {
  absl::Status error = RichError();
  absl::StatusOr<int> failed = RichError();
  auto from_status = [&]() -> absl::Status {
    RETURN_IF_ERROR(error);
    return absl::OkStatus();
  };
  auto from_status_or = [&]() -> absl::Status {
    RETURN_IF_ERROR(failed);
    return absl::OkStatus();
  };
  ExpectRichError(from_status());
  ExpectRichError(from_status_or());
  ExpectRichError(error);
  ExpectRichError(failed.status());
}

TEST(StatusMacrosTest, ReturnIfErrorInAStatusOrFunction) {
  auto run = [](absl::Status status) -> absl::StatusOr<std::string> {
    RETURN_IF_ERROR(status);
    return std::string("done");
  };
  EXPECT_EQ(*run(absl::OkStatus()), "done");
  ExpectRichError(run(RichError()).status());
}

absl::StatusOr<int> Branches(bool first, Source& a, Source& b) {
  int taken = 0;
  // Neither branch has braces: each macro must be exactly one statement.
  if (first)
    RETURN_IF_ERROR(a.Status());
  else
    RETURN_IF_ERROR(b.Status());
  if (!first)
    taken += 2;
  else
    taken += 1;
  return taken;
}

TEST(StatusMacrosTest, ReturnIfErrorInIfElseWithoutBraces) {
  Source a, b;
  EXPECT_EQ(*Branches(true, a, b), 1);
  EXPECT_EQ(*Branches(false, a, b), 2);
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(b.calls, 1);
  b.status = absl::NotFoundError("b");
  EXPECT_EQ(*Branches(true, a, b), 1);  // b is not evaluated
  EXPECT_EQ(Branches(false, a, b).status(), absl::NotFoundError("b"));
  a.status = absl::NotFoundError("a");
  EXPECT_EQ(Branches(true, a, b).status(), absl::NotFoundError("a"));
  EXPECT_EQ(a.calls, 3);
  EXPECT_EQ(b.calls, 2);
}

absl::StatusOr<int> AssignDeclared(Source& source) {
  ASSIGN_OR_RETURN(std::unique_ptr<int> typed, source.Pointer(20));
  ASSIGN_OR_RETURN(auto deduced, source.Pointer(22));
  return *typed + *deduced;
}

TEST(StatusMacrosTest, AssignOrReturnDeclaresMoveOnlyValues) {
  Source source;
  EXPECT_EQ(*AssignDeclared(source), 42);
  EXPECT_EQ(source.calls, 2);
}

TEST(StatusMacrosTest, AssignOrReturnReturnsTheStatusUnchanged) {
  Source source;
  source.status = RichError();
  ExpectRichError(AssignDeclared(source).status());
  EXPECT_EQ(source.calls, 1);  // stopped at the first
}

TEST(StatusMacrosTest, AssignOrReturnAssignsExistingLvalues) {
  struct Holder {
    std::unique_ptr<int> slot;
  };
  Source source;
  Holder holder;
  std::unique_ptr<int> local = std::make_unique<int>(1);
  auto run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(local, source.Pointer(5));
    ASSIGN_OR_RETURN(holder.slot, source.Pointer(6));
    return absl::OkStatus();
  };
  ASSERT_TRUE(run().ok());
  EXPECT_EQ(*local, 5);
  EXPECT_EQ(*holder.slot, 6);

  // On an error the target keeps its value.
  source.status = absl::InternalError("no");
  EXPECT_EQ(run(), absl::InternalError("no"));
  EXPECT_EQ(*local, 5);
  EXPECT_EQ(source.calls, 3);
}

TEST(StatusMacrosTest, AssignOrReturnMovesAndNeverCopies) {
  auto make = []() -> absl::StatusOr<Counted> { return Counted(); };
  auto run = [&]() -> absl::StatusOr<Counted> {
    ASSIGN_OR_RETURN(Counted declared, make());
    EXPECT_EQ(declared.copies, 0);
    Counted assigned;
    ASSIGN_OR_RETURN(assigned, make());
    EXPECT_EQ(assigned.copies, 0);
    EXPECT_GE(assigned.moves, 1);
    return declared;
  };
  absl::StatusOr<Counted> result = run();
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->copies, 0);
}

TEST(StatusMacrosTest, AssignOrReturnEvaluatesOnce) {
  Source source;
  auto run = [&]() -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(int value, [&]() -> absl::StatusOr<int> {
      ++source.calls;
      return 3;
    }());
    return value;
  };
  EXPECT_EQ(*run(), 3);
  EXPECT_EQ(source.calls, 1);
}

template <typename A, typename B>
absl::StatusOr<std::pair<A, B>> MakePair(A a, B b) {
  return std::pair<A, B>(a, b);
}

TEST(StatusMacrosTest, ExpressionsMayContainCommas) {
  auto run = []() -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(auto pair, MakePair<int, int>(2, 3));
    RETURN_IF_ERROR(MakePair<int, int>(0, 0));
    return pair.first * pair.second;
  };
  EXPECT_EQ(*run(), 6);
}

TEST(StatusMacrosTest, TemporariesAreUniqueOnOneLine) {
  auto run = []() -> absl::StatusOr<int> {
    // clang-format off
    ASSIGN_OR_RETURN(int a, absl::StatusOr<int>(1)); ASSIGN_OR_RETURN(int b, absl::StatusOr<int>(2));
    // clang-format on
    return a + b;
  };
  EXPECT_EQ(*run(), 3);
}

TEST(StatusMacrosTest, AssignOrReturnInBracedIfElse) {
  auto run = [](bool first) -> absl::StatusOr<int> {
    int value = 0;
    if (first) {
      ASSIGN_OR_RETURN(value, absl::StatusOr<int>(1));
    } else {
      ASSIGN_OR_RETURN(value, absl::StatusOr<int>(absl::AbortedError("second")));
    }
    return value;
  };
  EXPECT_EQ(*run(true), 1);
  EXPECT_EQ(run(false).status(), absl::AbortedError("second"));
}

}  // namespace
}  // namespace attnserve
