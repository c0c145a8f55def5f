#include "engine/chat_template/chat_template.h"

#include <gtest/gtest.h>

TEST(ChatTemplateTest, Placeholder) { EXPECT_TRUE(attnserve::ChatTemplate::Parse("x", "t").ok()); }
