#include "kernels/include_check.h"

#include <sys/stat.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/scoped_env.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::kernels {
namespace {

using ::testing::HasSubstr;

struct IncludeCase {
  std::string name;
  std::string source;
  std::vector<std::string> shipped;
  int line;             // 0: allowed
  std::string message;  // a part of the refusal
};

std::ostream& operator<<(std::ostream& out, const IncludeCase& c) { return out << c.name; }

class IncludeCheckTest : public ::testing::TestWithParam<IncludeCase> {};

// Every case is read as NVRTC 13 reads it (the fuzz target
// tests/reliability/fuzz/include_check_fuzzer.cc compares the two).
TEST_P(IncludeCheckTest, RefusesWhatNvrtcWouldIncludeFromTheHost) {
  const IncludeCase& c = GetParam();
  const IncludeRules rules{.shipped = c.shipped, .toolkit_include_dir = ToolkitIncludeDir("")};
  if (rules.toolkit_include_dir.empty() && c.message.find("toolkit") != std::string::npos) {
    GTEST_SKIP() << "no CUDA toolkit here";
  }
  std::optional<IncludeProblem> problem = FindForbiddenInclude(c.source, rules);
  if (c.line == 0) {
    EXPECT_EQ(problem, std::nullopt) << "line " << problem->line << ": " << problem->message;
    return;
  }
  ASSERT_NE(problem, std::nullopt);
  EXPECT_EQ(problem->line, c.line) << problem->message;
  EXPECT_THAT(problem->message, HasSubstr(c.message));
}

INSTANTIATE_TEST_SUITE_P(
    Sources, IncludeCheckTest,
    ::testing::Values(
        IncludeCase{"ToolkitHeader",
                    "#include <cuda_fp16.h>\n#include \"cuda_bf16.h\"\n",
                    {},
                    0,
                    "toolkit"},
        IncludeCase{"ShippedHeaders",
                    "#include \"tile.cuh\"\n%:include <detail/mma.cuh>\n",
                    {"tile.cuh", "detail/mma.cuh"},
                    0,
                    ""},
        IncludeCase{"InCommentsAndStrings",
                    "// #include \"/etc/passwd\"\n/* #include </etc/passwd> */\n"
                    "const char* s = \"#include \\\"/etc/passwd\\\"\";\n",
                    {},
                    0,
                    ""},
        IncludeCase{"HasIncludeOfAToolkitHeader",
                    "#if __has_include(<cuda_fp16.h>)\n#endif\n",
                    {},
                    0,
                    "toolkit"},
        // NVRTC is given a C string: nothing after a NUL reaches it.
        IncludeCase{
            "AfterANul", std::string("int a;") + '\0' + "#include \"/etc/passwd\"\n", {}, 0, ""},
        // A lone CR ends no line: the include is part of the comment.
        IncludeCase{
            "LoneCarriageReturnIsNoLineBreak", "// c \r#include \"/etc/passwd\"\n", {}, 0, ""},
        IncludeCase{"RelativeToTheWorkingDirectory",
                    "#include \"etc/passwd\"\n",
                    {"a.h"},
                    1,
                    "#include \"etc/passwd\" is neither a header of the family's (a.h) nor one "
                    "of the CUDA toolkit's"},
        IncludeCase{"AngleNotShipped", "\n#include <passwd>\n", {}, 2, "it ships none"},
        IncludeCase{
            "DotSlashIsNotTheShippedName", "#include \"./a.h\"\n", {"a.h"}, 1, "is neither"},
        IncludeCase{"ToolkitFolderIsNoHeader", "#include <crt>\n", {}, 1, "is neither"},
        IncludeCase{"UpThroughTheToolkit",
                    "#include <crt/../../../../etc/passwd>\n",
                    {},
                    1,
                    "goes up a folder (..)"},
        IncludeCase{
            "Absolute", "#include \"/home/u/.ssh/id_ed25519\"\n", {}, 1, "names an absolute path"},
        IncludeCase{"Computed",
                    "#define F \"/etc/shadow\"\n#include F\n",
                    {},
                    2,
                    "#include F is computed by a macro"},
        IncludeCase{"IncludeNextImportEmbed",
                    "#include_next <a.h>\n#import \"a.h\"\n#embed \"/etc/passwd\"\n",
                    {},
                    1,
                    "#include_next <a.h> is neither"},
        IncludeCase{"Embed", "#embed \"/etc/passwd\"\n", {}, 1, "#embed \"/etc/passwd\""},
        IncludeCase{"HasInclude",
                    "#if __has_include(\"/etc/passwd\")\n#endif\n",
                    {},
                    1,
                    "__has_include(\"/etc/passwd\") names an absolute path"},
        IncludeCase{"HasIncludeComputed",
                    "#define N <x.h>\n#if __has_include(N)\n#endif\n",
                    {},
                    2,
                    "is computed by a macro"},
        IncludeCase{"InsideIfZero", "#if 0\n#include \"/etc/passwd\"\n#endif\n", {}, 2, "absolute"},
        // The bypasses of the old check (issue 44, finding 3).
        IncludeCase{"BackslashCrLfSplice",
                    "// x \\\r\n/*\n#include \"/etc/passwd\"\n// */\n",
                    {},
                    3,
                    "absolute"},
        IncludeCase{"BackslashCrCrLfSplice",
                    "// x \\\r\r\n/*\n#include \"/etc/passwd\"\n// */\n",
                    {},
                    3,
                    "absolute"},
        IncludeCase{"SpliceInTheHeaderName",
                    "#include \"/etc/pa\\\r\nsswd\"\n",
                    {},
                    1,
                    "\"/etc/passwd\" names an absolute path"},
        IncludeCase{"RawStringHidesAQuote",
                    "auto s = R\"(\" /*)\";\n#include \"/etc/passwd\"\n// */\n",
                    {},
                    2,
                    "absolute"},
        IncludeCase{"Utf8RawStringHidesAQuote",
                    "auto s = u8R\"x(\" /*)x\";\n#include \"etc/passwd\"\n// */\n",
                    {},
                    2,
                    "is neither"},
        IncludeCase{"RawStringHidesAnIncludeButNotUnderCxx03",
                    "auto s = R\"x(\n#include \"/etc/passwd\"\n)x\";\n",
                    {},
                    2,
                    "(as -std=c++03 reads it)"},
        IncludeCase{"AfterALiteralRIsASuffix",
                    "#define Q \"abc\"R\"x(\n#include \"/etc/passwd\"\n)x\"\n",
                    {},
                    2,
                    "absolute"},
        IncludeCase{"InAPpNumberRIsNoPrefix",
                    "#define Q 1R\"x(\n#include \"/etc/passwd\"\n)x\"\n",
                    {},
                    2,
                    "absolute"},
        IncludeCase{
            "RawStringAfterADollar", "#define Q $R\"x(\n)x\"\n", {}, 1, "right after a character"},
        IncludeCase{
            "RawStringWithABadDelimiter", "auto s = R\"a b(\n)a b\";\n", {}, 1, "bad delimiter"},
        IncludeCase{"UnterminatedRawString",
                    "auto s = R\"x(\n#include <cuda_fp16.h>\n",
                    {},
                    1,
                    "does not end"},
        IncludeCase{"DigitSeparator",
                    "#define Q 1'2'/*'\n#include \"/etc/passwd\"\n*/\n",
                    {},
                    2,
                    "absolute"},
        IncludeCase{"CharacterLiteralUnderCxx11",
                    "#define Q 1'2'//'\n#include \"/etc/passwd\"\n",
                    {},
                    2,
                    "absolute"},
        IncludeCase{"Digraph", "  %:  include \"/etc/passwd\"\n", {}, 1, "absolute"},
        IncludeCase{"DoubleDigraph", "%:%:include \"etc/passwd\"\n", {}, 1, "is neither"},
        IncludeCase{"DigraphAfterASpannedComment", "/*\n*/ %:include <x.h>\n", {}, 2, "is neither"},
        IncludeCase{
            "TrigraphHash", "?\?=include \"/etc/passwd\"\n", {}, 1, "(as -std=c++14 reads it)"},
        IncludeCase{"TrigraphSplice",
                    "// c ?\?/\n/*\n#include \"/etc/passwd\"\n// */\n",
                    {},
                    3,
                    "(as -std=c++14 reads it)"},
        IncludeCase{"FormFeedBeforeInclude", "\v#\finclude \"/etc/passwd\"\n", {}, 1, "absolute"},
        IncludeCase{"CommentsAroundTheDirective",
                    "// x\n  # /* hidden */ include \\\n <../../x/y.h>\n",
                    {},
                    2,
                    "#include <../../x/y.h> goes up a folder (..)"}),
    [](const ::testing::TestParamInfo<IncludeCase>& info) { return info.param.name; });

TEST(ToolkitIncludeDirTest, CudaHomeComesFirstWhenItHoldsTheHeaders) {
  ::autotune::testing::TempDir home;
  ASSERT_EQ(mkdir(home.File("include").c_str(), 0700), 0);
  {
    ::autotune::testing::ScopedEnv cuda_home("CUDA_HOME", home.path());
    EXPECT_NE(ToolkitIncludeDir(""), home.File("include"));  // no cuda_fp16.h there
  }
  ASSERT_OK(WriteFileAtomically(home.File("include/cuda_fp16.h"), "// fp16\n"));
  ::autotune::testing::ScopedEnv cuda_home("CUDA_HOME", home.path());
  EXPECT_EQ(ToolkitIncludeDir("/nonexistent/lib64"), home.File("include"));

  // A header of that folder is allowed by name, one outside it is not.
  const IncludeRules rules{.shipped = {}, .toolkit_include_dir = ToolkitIncludeDir("")};
  EXPECT_EQ(FindForbiddenInclude("#include <cuda_fp16.h>\n", rules), std::nullopt);
  EXPECT_NE(FindForbiddenInclude("#include <cuda_bf16.h>\n", rules), std::nullopt);
}

}  // namespace
}  // namespace autotune::kernels
