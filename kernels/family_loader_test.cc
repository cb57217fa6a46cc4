#include "kernels/family_loader.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/compile_request.h"
#include "kernels/testdata.h"
#include "proto/problem.h"

namespace autotune::kernels {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

v1::KernelFamily GoodFamily() {
  absl::StatusOr<v1::KernelFamily> family = LoadFamilyFile(Testdata("good/axpy.textproto"));
  EXPECT_TRUE(family.ok()) << family.status();
  return family.ok() ? *family : v1::KernelFamily();
}

TEST(LoadFamilyFileTest, LoadsTheGoodFamilyAndReadsItsSource) {
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family, LoadFamilyFile(Testdata("good/axpy.textproto")));
  EXPECT_EQ(family.name(), "axpy");
  EXPECT_EQ(family.kernel_name(), "axpy");
  EXPECT_EQ(family.source_file(), "axpy.cu");  // kept; the hash ignores it
  EXPECT_THAT(family.source(), HasSubstr("__global__ void axpy_reference("));
  ASSERT_EQ(family.params_size(), 2);
  EXPECT_THAT(family.params(0).values(), ElementsAre(64, 128, 256, 512, 1024, 2048));
  EXPECT_EQ(family.buffers(1).role(), v1::INOUT);
}

TEST(LoadFamilyFileTest, ReadsTheHeadersBesideTheDescriptorIntoTheFamily) {
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family,
                       LoadFamilyFile(Testdata("with_headers/axpy.textproto")));
  ASSERT_EQ(family.headers_size(), 1);
  EXPECT_EQ(family.headers(0).name(), "detail/fma.cuh");
  EXPECT_EQ(family.headers(0).file(), "detail/fma.cuh");  // kept; the hash ignores it
  EXPECT_THAT(family.headers(0).text(), HasSubstr("axpy_fma(float alpha"));
  // The hash covers the header's text, not where it was read from.
  v1::KernelFamily moved = family;
  moved.mutable_headers(0)->set_file("elsewhere/fma.cuh");
  EXPECT_EQ(FamilyContentHash(moved), FamilyContentHash(family));
  v1::KernelFamily changed = family;
  changed.mutable_headers(0)->mutable_text()->append("\n");
  EXPECT_NE(FamilyContentHash(changed), FamilyContentHash(family));
}

// A descriptor from someone else's repository: a link beside it that leads
// to the reader's own files is refused, one that stays in the folder is not.
TEST(LoadFamilyFileTest, ALinkOutOfTheDescriptorsFolderIsRefused) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::filesystem::path root =
      std::filesystem::path(tmp != nullptr ? tmp : "/tmp") / absl::StrCat("links.", getpid());
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "family");
  std::filesystem::copy_file(Testdata("good/axpy.textproto"), root / "family" / "axpy.textproto");
  std::filesystem::copy_file(Testdata("good/axpy.cu"), root / "secret.cu");
  std::filesystem::create_symlink("../secret.cu", root / "family" / "axpy.cu");
  const std::string descriptor = (root / "family" / "axpy.textproto").string();
  EXPECT_THAT(LoadFamilyFile(descriptor),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("source_file: 'axpy.cu' leads to '"),
                             HasSubstr("secret.cu' (through a link), outside the descriptor's "
                                       "folder"))));
  std::filesystem::rename(root / "secret.cu", root / "family" / "real.cu");
  std::filesystem::remove(root / "family" / "axpy.cu");
  std::filesystem::create_symlink("real.cu", root / "family" / "axpy.cu");
  EXPECT_OK(LoadFamilyFile(descriptor));
  std::filesystem::remove_all(root);
}

TEST(LoadFamilyFileTest, MissingFileIsNotFound) {
  EXPECT_THAT(LoadFamilyFile(Testdata("good/nope.textproto")),
              StatusIs(absl::StatusCode::kNotFound,
                       absl::StrCat("cannot read ", Testdata("good/nope.textproto"),
                                    ": No such file or directory")));
}

struct BadFileCase {
  std::string file;     // under testdata/bad/
  std::string message;  // after "<path>"
};

void PrintTo(const BadFileCase& c, std::ostream* os) { *os << c.file.substr(0, c.file.find('.')); }

class BadFamilyFileTest : public ::testing::TestWithParam<BadFileCase> {};

TEST_P(BadFamilyFileTest, NamesFileLineAndField) {
  const std::string path = Testdata(absl::StrCat("bad/", GetParam().file));
  EXPECT_THAT(LoadFamilyFile(path),
              StatusIs(absl::StatusCode::kInvalidArgument, absl::StrCat(path, GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Descriptors, BadFamilyFileTest,
    ::testing::Values(
        BadFileCase{"unknown_name.textproto",
                    ":19: buffers[1].shape[0]: unknown name 'n2' (did you mean 'n'?) (known: "
                    "BLOCK, ELEMS, dtype_bytes, n)"},
        BadFileCase{"empty_param.textproto",
                    ":7: params[1].values: empty (list at least one value)"},
        BadFileCase{"no_reference.textproto",
                    ": reference: must be set (results are checked against a reference kernel)"},
        BadFileCase{"reference_without_kernel.textproto",
                    ":30: reference.kernel_name: must be set"},
        BadFileCase{"syntax_error.textproto",
                    ":11:2: KernelFamily has no field 'bufers' (did you mean 'buffers'?)"},
        BadFileCase{"duplicate_names.textproto",
                    ":10: dims[1].name: 'BLOCK' is also the name of params[0]"},
        BadFileCase{"missing_source.textproto",
                    absl::StrCat(":4: source_file: cannot read ", AUTOTUNE_KERNELS_DIR,
                                 "/testdata/bad/does_not_exist.cu: No such file or directory")},
        // Found on e01f360: source_file took absolute and ".." paths.
        BadFileCase{"source_absolute.textproto",
                    ":4: source_file: '/etc/passwd' is absolute; name a file beside the "
                    "descriptor or below it"},
        BadFileCase{"source_going_up.textproto",
                    ":4: source_file: '../good/axpy.cu' goes up a folder (..); name a file beside "
                    "the descriptor or below it"},
        BadFileCase{"missing_tolerance.textproto",
                    ":10: dtypes[1]: no tolerance for fp16 (add a tolerances entry with rtol and "
                    "atol)"},
        BadFileCase{"expression_syntax.textproto",
                    ":26: launch.grid[0]: syntax error at position 26 in 'ceil_div(n, BLOCK * "
                    "ELEMS': Missing parenthesis"}),
    [](const ::testing::TestParamInfo<BadFileCase>& info) {
      std::string name = info.param.file.substr(0, info.param.file.find('.'));
      return name;
    });

TEST(ValidateFamilyTest, TheGoodFamilyPasses) {
  EXPECT_OK(ValidateFamily(GoodFamily(), "RegisterKernel"));
}

// Found: a new user's register took five attempts, one missing field each.
TEST(ValidateFamilyTest, EveryProblemIsReportedAtOnceOnALineOfItsOwn) {
  v1::KernelFamily family = GoodFamily();
  family.clear_reference();
  family.mutable_tolerances()->RemoveLast();  // fp16's
  family.clear_bytes_per_call();
  family.clear_flops_per_call();
  family.mutable_buffers(0)->set_shape(0, "n + m");
  const absl::Status status = ValidateFamily(family, "RegisterKernel");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(absl::StrSplit(status.message(), '\n'),
              ElementsAre(HasSubstr("RegisterKernel: buffers[0].shape[0]: "),
                          "RegisterKernel: reference: must be set (results are checked against a "
                          "reference kernel)",
                          "RegisterKernel: dtypes[1]: no tolerance for fp16 (add a tolerances "
                          "entry with rtol and atol)",
                          HasSubstr("RegisterKernel: bytes_per_call: must be set"),
                          HasSubstr("RegisterKernel: flops_per_call: must be set")));
}

TEST(LoadFamilyFileTest, ASourceFileThatCannotBeReadIsReportedWithTheOtherProblems) {
  ::autotune::testing::TempDir dir;
  const std::string path = dir.path() + "/f.textproto";
  ASSERT_OK(WriteFileAtomically(path, "source_file: \"missing.cu\"\nname: \"Bad\"\n"));
  const absl::StatusOr<v1::KernelFamily> family = LoadFamilyFile(path);
  ASSERT_FALSE(family.ok());
  EXPECT_THAT(family.status().message(),
              AllOf(HasSubstr(":1: source_file: "), HasSubstr(":2: name: 'Bad' must match"),
                    HasSubstr("params: empty"), Not(HasSubstr("source: must be set"))));
}

// Each param, dim, buffer and scalar reports its own problem, and a problem
// in a param's values leaves its name usable by the expressions.
TEST(ValidateFamilyTest, EachItemReportsItsProblemAndBadValuesKeepTheirNames) {
  v1::KernelFamily family = GoodFamily();
  family.mutable_params(0)->clear_values();
  family.mutable_params(1)->clear_values();
  family.mutable_buffers(0)->set_shape(0, "m");
  family.mutable_buffers(1)->set_shape(0, "k");
  family.mutable_scalars(0)->set_value("");
  family.mutable_scalars(1)->set_value("");
  const absl::Status status = ValidateFamily(family, "R");
  EXPECT_THAT(absl::StrSplit(status.message(), '\n'),
              ElementsAre("R: params[0].values: empty (list at least one value)",
                          "R: params[1].values: empty (list at least one value)",
                          HasSubstr("R: buffers[0].shape[0]: unknown name 'm'"),
                          HasSubstr("R: buffers[1].shape[0]: unknown name 'k'"),
                          "R: scalars[0].value: must be set", "R: scalars[1].value: must be set"));
}

TEST(ReadFamilyFileTest, KeepsTheFamilyWithEveryProblemAndWhatCanStillCompile) {
  ::autotune::testing::TempDir dir;
  const std::string good = ReadFile(Testdata("good/axpy.textproto")).value();
  ASSERT_OK(
      WriteFileAtomically(dir.path() + "/axpy.cu", ReadFile(Testdata("good/axpy.cu")).value()));
  const std::string path = dir.path() + "/f.textproto";

  // An unknown field is skipped and reported with the closest name; the
  // rest of the file is read and checked.
  ASSERT_OK(WriteFileAtomically(
      path, absl::StrReplaceAll(good, {{"description:", "descriptoin:"}, {"[1, 2, 4, 8]", "[]"}})));
  absl::StatusOr<FamilyFile> file = ReadFamilyFile(path);
  ASSERT_OK(file.status());
  EXPECT_EQ(file->family.name(), "axpy");
  EXPECT_THAT(absl::StrSplit(file->problems.message(), '\n'),
              ElementsAre(HasSubstr("KernelFamily has no field 'descriptoin' (did you mean "
                                    "'description'?)"),
                          HasSubstr("params[1].values: empty")));
  EXPECT_FALSE(file->tuned_compilable);     // its params
  EXPECT_TRUE(file->reference_compilable);  // the reference reads none
  EXPECT_GT(file->Line("params[1]"), 0);
  EXPECT_THAT(LoadFamilyFile(path).status().message(), HasSubstr("no field 'descriptoin'"));

  ASSERT_OK(WriteFileAtomically(path, absl::StrReplaceAll(good, {{"axpy_reference", "1bad"}})));
  file = ReadFamilyFile(path);
  ASSERT_OK(file.status());
  EXPECT_TRUE(file->tuned_compilable);
  EXPECT_FALSE(file->reference_compilable);

  ASSERT_OK(WriteFileAtomically(path, good));
  file = ReadFamilyFile(path);
  ASSERT_OK(file.status());
  EXPECT_OK(file->problems);
  EXPECT_TRUE(file->tuned_compilable && file->reference_compilable);

  // A syntax error or an unknown enum value stops the parse: an error, with
  // the closest value.
  ASSERT_OK(WriteFileAtomically(path, absl::StrReplaceAll(good, {{"FLOAT16]", "FLAOT16]"}})));
  EXPECT_THAT(ReadFamilyFile(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Unknown enumeration value of \"FLAOT16\" for field "
                                 "\"dtypes\". (did you mean 'FLOAT16'?)")));
}

// The allowlist as CheckCompileOption states it.
#define ALLOWED_OPTIONS                                                                       \
  " (allowed: -D<NAME>[=<value>], -U<NAME>, -std=c++11|c++14|c++17|c++20, -use_fast_math, "   \
  "-ftz=, -prec-div=, -prec-sqrt=, -fmad= (true|false), -lineinfo, -maxrregcount=<16..255>, " \
  "-default-device, -restrict, -extra-device-vectorization, -w)"

struct MutationCase {
  std::string name;
  std::function<void(v1::KernelFamily&)> mutate;
  std::string message;  // after "RegisterKernel: "
};

void PrintTo(const MutationCase& c, std::ostream* os) { *os << c.name; }

class ValidateFamilyMutationTest : public ::testing::TestWithParam<MutationCase> {};

// The mutation's problem is the first one reported (a change may cause
// others: a dtype replaced leaves its tolerance without one).
TEST_P(ValidateFamilyMutationTest, RejectsWithFieldAndReason) {
  v1::KernelFamily family = GoodFamily();
  GetParam().mutate(family);
  const absl::Status status = ValidateFamily(family, "RegisterKernel");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  const std::vector<std::string> lines = absl::StrSplit(status.message(), '\n');
  EXPECT_EQ(lines[0], absl::StrCat("RegisterKernel: ", GetParam().message)) << status;
}

INSTANTIATE_TEST_SUITE_P(
    Families, ValidateFamilyMutationTest,
    ::testing::Values(
        MutationCase{"BadName", [](v1::KernelFamily& f) { f.set_name("Axpy"); },
                     "name: 'Axpy' must match [a-z][a-z0-9_]*"},
        MutationCase{"NoKernelName", [](v1::KernelFamily& f) { f.clear_kernel_name(); },
                     "kernel_name: must be set (the entry point)"},
        MutationCase{"NoSource", [](v1::KernelFamily& f) { f.clear_source(); },
                     "source: must be set (the CUDA source text)"},
        MutationCase{"HugeSource",
                     [](v1::KernelFamily& f) { f.set_source(std::string((1 << 20) + 1, ' ')); },
                     "source: 1048577 bytes, more than the limit of 1048576"},
        MutationCase{"NoParams", [](v1::KernelFamily& f) { f.clear_params(); },
                     "params: empty (a family needs at least one tunable parameter)"},
        MutationCase{"DuplicateParam",
                     [](v1::KernelFamily& f) { f.mutable_params(1)->set_name("BLOCK"); },
                     "params[1].name: 'BLOCK' is also the name of params[0]"},
        MutationCase{"DefaultConfigUnknownParam",
                     [](v1::KernelFamily& f) {
                       (*f.mutable_default_config()->mutable_params())["WARPS"] = 1;
                     },
                     "default_config.params[\"WARPS\"]: is not a parameter of the family"},
        MutationCase{"DefaultConfigValueNotListed",
                     [](v1::KernelFamily& f) {
                       auto& params = *f.mutable_default_config()->mutable_params();
                       params[f.params(0).name()] = 3;
                       params[f.params(1).name()] = f.params(1).values(0);
                     },
                     "default_config.params[\"BLOCK\"]: 3 is not one of its values"},
        MutationCase{"DefaultConfigIncomplete",
                     [](v1::KernelFamily& f) {
                       (*f.mutable_default_config()->mutable_params())[f.params(0).name()] =
                           f.params(0).values(0);
                     },
                     "default_config: gives no value for 'ELEMS'"},
        MutationCase{"DuplicateValue",
                     [](v1::KernelFamily& f) { f.mutable_params(1)->add_values(2); },
                     "params[1].values[4]: 2 is listed twice"},
        MutationCase{"ReservedPrefix",
                     [](v1::KernelFamily& f) { f.mutable_params(1)->set_name("AUTOTUNE_X"); },
                     "params[1].name: 'AUTOTUNE_X' is reserved (AUTOTUNE_ macros)"},
        MutationCase{"DTypeBytesIsReserved",
                     [](v1::KernelFamily& f) { f.mutable_dims(0)->set_name("dtype_bytes"); },
                     "dims[0].name: 'dtype_bytes' is reserved (a name of the expression "
                     "language)"},
        MutationCase{"ArchIsReserved",
                     [](v1::KernelFamily& f) { f.mutable_params(0)->set_name("arch"); },
                     "params[0].name: 'arch' is reserved (a name of the expression language)"},
        MutationCase{"ArchOnlyInConstraints",
                     [](v1::KernelFamily& f) {
                       f.mutable_launch()->set_dynamic_shared_bytes("arch_specific * 1024");
                     },
                     "launch.dynamic_shared_bytes: unknown name 'arch_specific' (known: BLOCK, ELEMS, "
                     "dtype_bytes, n, sm_count)"},
        MutationCase{"SmCountIsReserved",
                     [](v1::KernelFamily& f) { f.mutable_params(0)->set_name("sm_count"); },
                     "params[0].name: 'sm_count' is reserved (a name of the expression "
                     "language)"},
        MutationCase{"SmCountOnlyInTheLaunch",
                     [](v1::KernelFamily& f) { f.mutable_scalars(0)->set_value("sm_count"); },
                     "scalars[0].value: unknown name 'sm_count' (known: BLOCK, ELEMS, "
                     "dtype_bytes, n)"},
        MutationCase{"FunctionNameIsReserved",
                     [](v1::KernelFamily& f) { f.mutable_buffers(0)->set_name("max"); },
                     "buffers[0].name: 'max' is reserved (a name of the expression language)"},
        MutationCase{"ScalarClashesWithBuffer",
                     [](v1::KernelFamily& f) { f.mutable_scalars(0)->set_name("x"); },
                     "scalars[0].name: 'x' is also the name of buffers[0]"},
        MutationCase{"AFractionForAnIntegerScalar",
                     [](v1::KernelFamily& f) {
                       f.mutable_scalars(0)->set_dtype(v1::INT32);
                       f.mutable_scalars(0)->set_value("1e-5");
                     },
                     "scalars[0].value: '1e-5' = 1e-05 is not an integer, and alpha is int32 (a "
                     "fraction needs dtype: FLOAT32)"},
        MutationCase{"TooManyConfigs",
                     [](v1::KernelFamily& f) {
                       for (const char* name : {"A", "B", "C"}) {
                         v1::TunableParameter* p = f.add_params();
                         p->set_name(name);
                         for (int v = 0; v < 100; ++v) p->add_values(v);
                       }
                     },
                     "params: 24000000 configs, more than the limit of 1048576"},
        MutationCase{"NoDims", [](v1::KernelFamily& f) { f.clear_dims(); },
                     "dims: empty (a family needs at least one problem dimension)"},
        MutationCase{"MinAboveMax",
                     [](v1::KernelFamily& f) {
                       f.mutable_dims(0)->set_min(10);
                       f.mutable_dims(0)->set_max(5);
                     },
                     "dims[0]: min 10 is above max 5"},
        MutationCase{"NoDTypes", [](v1::KernelFamily& f) { f.clear_dtypes(); },
                     "dtypes: empty (list the supported dtypes)"},
        MutationCase{"UnknownDType",
                     [](v1::KernelFamily& f) { f.set_dtypes(1, static_cast<v1::DType>(42)); },
                     "dtypes[1]: unknown dtype 42"},
        MutationCase{"TensorMapOfNoBuffer",
                     [](v1::KernelFamily& f) {
                       v1::TensorMap* map = f.add_tensor_maps();
                       map->set_buffer("z");
                       map->add_box("BLOCK");
                     },
                     "tensor_maps[0].buffer: 'z' is not one of the family's buffers"},
        MutationCase{"TensorMapBoxRank",
                     [](v1::KernelFamily& f) {
                       v1::TensorMap* map = f.add_tensor_maps();
                       map->set_buffer("x");
                       map->add_box("BLOCK");
                       map->add_box("ELEMS");
                     },
                     "tensor_maps[0].box: 2 expressions for the 1 dims of 'x' (one each, "
                     "outermost first)"},
        MutationCase{"TensorMapBoxUnknownName",
                     [](v1::KernelFamily& f) {
                       v1::TensorMap* map = f.add_tensor_maps();
                       map->set_buffer("x");
                       map->add_box("TILE");
                     },
                     "tensor_maps[0].box[0]: unknown name 'TILE' (known: BLOCK, ELEMS, "
                     "dtype_bytes, n)"},
        MutationCase{"TensorMapSwizzle",
                     [](v1::KernelFamily& f) {
                       v1::TensorMap* map = f.add_tensor_maps();
                       map->set_buffer("x");
                       map->add_box("BLOCK");
                       map->set_swizzle(static_cast<v1::TensorMapSwizzle>(9));
                     },
                     "tensor_maps[0].swizzle: unknown value 9"},
        MutationCase{"TooManyTensorMaps",
                     [](v1::KernelFamily& f) {
                       for (int i = 0; i < 9; ++i) {
                         v1::TensorMap* map = f.add_tensor_maps();
                         map->set_buffer("x");
                         map->add_box("BLOCK");
                       }
                     },
                     "tensor_maps: 9 tensor maps, more than the limit of 8"},
        MutationCase{"NoRole", [](v1::KernelFamily& f) { f.mutable_buffers(0)->clear_role(); },
                     "buffers[0].role: must be IN, OUT, INOUT or SCRATCH"},
        MutationCase{"FilledScratch",
                     [](v1::KernelFamily& f) { f.mutable_buffers(0)->set_role(v1::SCRATCH); },
                     "buffers[0].fill: a SCRATCH buffer starts zeroed and is never filled; "
                     "leave fill unset"},
        MutationCase{"NoOutput",
                     [](v1::KernelFamily& f) { f.mutable_buffers(1)->set_role(v1::IN); },
                     "buffers: no OUT or INOUT buffer (results are compared with the "
                     "reference)"},
        MutationCase{"EmptyShape", [](v1::KernelFamily& f) { f.mutable_buffers(0)->clear_shape(); },
                     "buffers[0].shape: empty (one expression per dimension)"},
        MutationCase{"BadUniformFill",
                     [](v1::KernelFamily& f) { f.mutable_buffers(0)->mutable_fill()->set_low(2); },
                     "buffers[0].fill: UNIFORM needs low < high (low 2, high 1)"},
        MutationCase{"ScalarSyntax",
                     [](v1::KernelFamily& f) { f.mutable_scalars(1)->set_value("n *"); },
                     "scalars[1].value: syntax error in 'n *': Unexpected end of expression at "
                     "position 4"},
        MutationCase{"NoLaunch", [](v1::KernelFamily& f) { f.clear_launch(); },
                     "launch: must be set (grid and block expressions)"},
        MutationCase{"FourBlockDims",
                     [](v1::KernelFamily& f) {
                       for (int i = 0; i < 3; ++i) f.mutable_launch()->add_block("1");
                     },
                     "launch.block: 4 expressions; give 1 to 3 (x, y, z)"},
        MutationCase{"SharedUnknownName",
                     [](v1::KernelFamily& f) {
                       f.mutable_launch()->set_dynamic_shared_bytes("BLOCK * TILE");
                     },
                     "launch.dynamic_shared_bytes: unknown name 'TILE' (known: BLOCK, ELEMS, "
                     "dtype_bytes, n, sm_count)"},
        MutationCase{"ConstraintAssignment",
                     [](v1::KernelFamily& f) { f.set_constraints(0, "ELEMS = 1"); },
                     "constraints[0]: assignment '=' at position 6 in 'ELEMS = 1' (compare "
                     "with '==')"},
        MutationCase{"ReferenceUsesAParam",
                     [](v1::KernelFamily&
                            f) { f.mutable_reference()->mutable_launch()->set_block(0, "BLOCK"); },
                     "reference.launch.block[0]: unknown name 'BLOCK' (known: dtype_bytes, n)"},
        MutationCase{"ReferenceWithoutLaunch",
                     [](v1::KernelFamily& f) { f.mutable_reference()->clear_launch(); },
                     "reference.launch: must be set (grid and block expressions)"},
        MutationCase{"ToleranceForOtherDType",
                     [](v1::KernelFamily& f) { f.mutable_tolerances(1)->set_dtype(v1::BFLOAT16); },
                     "tolerances[1].dtype: bf16 is not in dtypes"},
        MutationCase{"NegativeTolerance",
                     [](v1::KernelFamily& f) { f.mutable_tolerances(0)->set_atol(-1); },
                     "tolerances[0].atol: must be finite and >= 0"},
        MutationCase{"NoBytes", [](v1::KernelFamily& f) { f.clear_bytes_per_call(); },
                     "bytes_per_call: must be set (an expression of dims and params; \"0\" if "
                     "none)"},
        MutationCase{"FlopsUnknownName", [](v1::KernelFamily& f) { f.set_flops_per_call("2 * N"); },
                     "flops_per_call: unknown name 'N' (did you mean 'n'?) (known: BLOCK, ELEMS, "
                     "dtype_bytes, n)"},
        MutationCase{"UnknownBinding",
                     [](v1::KernelFamily& f) { f.set_binding(static_cast<v1::ParamBinding>(7)); },
                     "binding: unknown value 7"},
        MutationCase{"ArchOption",
                     [](v1::KernelFamily& f) { f.add_compile_options("-arch=sm_80"); },
                     "compile_options[0]: '-arch=sm_80' sets the architecture, which the "
                     "compiler chooses" ALLOWED_OPTIONS},
        // Found on e01f360: NVRTC truncated the file named (the audit log).
        MutationCase{"PchOption",
                     [](v1::KernelFamily& f) {
                       f.add_compile_options("-std=c++17");
                       f.add_compile_options("--create-pch=/var/lib/autotune/audit.log");
                     },
                     "compile_options[1]: '--create-pch=/var/lib/autotune/audit.log' is not an "
                     "allowed NVRTC option" ALLOWED_OPTIONS},
        // Found on e01f360: NVRTC appended its timings to the file named.
        MutationCase{"TimeOption", [](v1::KernelFamily& f) { f.add_compile_options("--time=x"); },
                     "compile_options[0]: '--time=x' is not an allowed NVRTC option" ALLOWED_OPTIONS},
        MutationCase{"IncludePathOption", [](v1::KernelFamily& f) { f.add_compile_options("-I/"); },
                     "compile_options[0]: '-I/' is not an allowed NVRTC option" ALLOWED_OPTIONS},
        // Found on e01f360: NVRTC read a 0600 file of the daemon's user and its
        // lines came back in the job's error.
        MutationCase{"AbsoluteInclude",
                     [](v1::KernelFamily& f) {
                       f.set_source("#include \"/home/u/.ssh/id_ed25519\"\n" + f.source());
                     },
                     "source: line 1: #include \"/home/u/.ssh/id_ed25519\" names an absolute "
                     "path; a family's source includes only the CUDA toolkit's headers and the "
                     "family's own headers"},
        MutationCase{"UpwardIncludeBehindACommentAndAContinuedLine",
                     [](v1::KernelFamily& f) {
                       f.set_source("// x\n  # /* hidden */ include \\\n <../../x/y.h>\n" +
                                    f.source());
                     },
                     "source: line 2: #include <../../x/y.h> goes up a folder (..); a family's "
                     "source includes only the CUDA toolkit's headers and the family's own headers"},
        MutationCase{"ComputedInclude",
                     [](v1::KernelFamily& f) {
                       f.set_source("#define F \"/etc/shadow\"\n%:include F\n" + f.source());
                     },
                     "source: line 2: #include F is computed by a macro; name the header as "
                     "\"file\" or <file>"},
        // Found on 2bc4d71 (issue 44): NVRTC resolved a relative include
        // against the compiling process's working directory (/ under
        // systemd), and a line joined by a backslash and CR LF or a raw
        // string hid a directive from the check.
        MutationCase{"RelativeIncludeNotShipped",
                     [](v1::KernelFamily& f) {
                       f.set_source("#include \"etc/passwd\"\n" + f.source());
                     },
                     "source: line 1: #include \"etc/passwd\" is neither a header of the "
                     "family's (it ships none) nor one of the CUDA toolkit's; a family's source "
                     "includes only the CUDA toolkit's headers and the family's own headers"},
        MutationCase{"IncludeAfterABackslashCrLfSplice",
                     [](v1::KernelFamily& f) {
                       f.set_source("// x \\\r\n/*\n#include \"/etc/passwd\"\n// */\n" +
                                    f.source());
                     },
                     "source: line 3: #include \"/etc/passwd\" names an absolute path; a "
                     "family's source includes only the CUDA toolkit's headers and the family's "
                     "own headers"},
        MutationCase{"IncludeAfterARawStringThatHidesAQuote",
                     [](v1::KernelFamily& f) {
                       f.set_source("auto s = R\"(\" /*)\";\n#include \"etc/passwd\"\n// */\n" +
                                    f.source());
                     },
                     "source: line 2: #include \"etc/passwd\" is neither a header of the "
                     "family's (it ships none) nor one of the CUDA toolkit's; a family's source "
                     "includes only the CUDA toolkit's headers and the family's own headers"},
        MutationCase{"ReferenceInclude",
                     [](v1::KernelFamily& f) {
                       f.mutable_reference()->set_source("#include </etc/passwd>\n");
                     },
                     "reference.source: line 1: #include </etc/passwd> names an absolute path; a "
                     "family's source includes only the CUDA toolkit's headers and the family's own "
                     "headers"},
        MutationCase{"HeaderNameGoingUp",
                     [](v1::KernelFamily& f) {
                       v1::SourceHeader* header = f.add_headers();
                       header->set_name("../x.h");
                       header->set_text("#define X 1\n");
                     },
                     "headers[0].name: '../x.h' is not a header name (parts of "
                     "[A-Za-z0-9_][A-Za-z0-9_.-]* joined by '/', at most 200 characters)"},
        MutationCase{"HeaderNamedTwice",
                     [](v1::KernelFamily& f) {
                       for (int i = 0; i < 2; ++i) {
                         v1::SourceHeader* header = f.add_headers();
                         header->set_name("detail/tiles.cuh");
                         header->set_text("#define X 1\n");
                       }
                     },
                     "headers[1].name: 'detail/tiles.cuh' is named twice"},
        MutationCase{"EmptyHeader",
                     [](v1::KernelFamily& f) { f.add_headers()->set_name("a.h"); },
                     "headers[0].text: empty (the header's text, or its file)"},
        MutationCase{"HeaderIncludingAHostFile",
                     [](v1::KernelFamily& f) {
                       v1::SourceHeader* header = f.add_headers();
                       header->set_name("a.h");
                       header->set_text("\n#include \"/etc/shadow\"\n");
                     },
                     "headers[0] (a.h): line 2: #include \"/etc/shadow\" names an absolute path; "
                     "a family's source includes only the CUDA toolkit's headers and the "
                     "family's own headers"}),
    [](const ::testing::TestParamInfo<MutationCase>& info) { return info.param.name; });

TEST(CheckCompileOptionTest, AllowsTheDocumentedOptionsAndNothingElse) {
  for (const char* allowed : {"-DBLOCK=128",
                              "-DX",
                              "--define-macro=T=float",
                              "-UNDEBUG",
                              "--undefine-macro=X",
                              "-std=c++17",
                              "--std=c++20",
                              "-use_fast_math",
                              "--use_fast_math",
                              "-ftz=true",
                              "--prec-div=false",
                              "-prec-sqrt=true",
                              "-fmad=false",
                              "-lineinfo",
                              "--generate-line-info",
                              "-maxrregcount=64",
                              "-default-device",
                              "--device-as-default-execution-space",
                              "-restrict",
                              "-extra-device-vectorization",
                              "-w",
                              "--disable-warnings"}) {
    EXPECT_OK(CheckCompileOption(allowed)) << allowed;
  }
  for (const char* refused : {"--create-pch=/tmp/x",
                              "--use-pch=/tmp/x",
                              "--pch-dir=/tmp",
                              "--pch",
                              "--time=/tmp/t",
                              "--fdevice-time-trace=/tmp/t",
                              "-I/etc",
                              "--include-path=/etc",
                              "-include=/etc/passwd",
                              "--pre-include=/etc/passwd",
                              "-arch=sm_90",
                              "--gpu-architecture=sm_90",
                              "-D1X=2",
                              "-D",
                              "-DX=\n#include </etc/passwd>",
                              "-UX=1",
                              "-std=gnu++17",
                              "-ftz=1",
                              "-maxrregcount=4096",
                              "-maxrregcount=x",
                              "-G",
                              "-dlto",
                              "DX",
                              "",
                              "--optix-ir"}) {
    EXPECT_THAT(CheckCompileOption(refused),
                StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_))
        << refused;
  }
}

TEST(LoadFamilyDirectoryTest, LoadsEveryFamilyInFileNameOrder) {
  ASSERT_OK_AND_ASSIGN(std::vector<v1::KernelFamily> families,
                       LoadFamilyDirectory(Testdata("good")));
  ASSERT_EQ(families.size(), 2);
  EXPECT_EQ(families[0].name(), "axpy");
  EXPECT_EQ(families[1].name(), "row_scale");
  EXPECT_THAT(families[1].source(), HasSubstr("template <int TILE_X, int TILE_Y>"));
}

TEST(LoadFamilyDirectoryTest, DuplicateNamesNameBothFiles) {
  EXPECT_THAT(
      LoadFamilyDirectory(Testdata("duplicate")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               absl::StrCat("family 'axpy' is defined twice: ", Testdata("duplicate/a.textproto"),
                            " and ", Testdata("duplicate/b.textproto"))));
}

TEST(LoadFamilyDirectoryTest, ReportsTheFirstBadFile) {
  EXPECT_THAT(LoadFamilyDirectory(Testdata("bad")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(Testdata("bad/duplicate_names.textproto:10: "))));
}

TEST(LoadFamilyDirectoryTest, MissingDirectoryIsNotFound) {
  EXPECT_THAT(LoadFamilyDirectory(Testdata("nope")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("is not a directory")));
}

TEST(FieldLineTest, FindsFieldsAndFallsBackToTheEnclosingOne) {
  v1::KernelFamily family;
  google::protobuf::TextFormat::ParseInfoTree locations;
  ASSERT_OK(ParseTextProtoFile(Testdata("good/axpy.textproto"), family, locations));
  EXPECT_EQ(FieldLine(family, locations, "name"), 4);
  EXPECT_EQ(FieldLine(family, locations, "params[1]"), 9);
  EXPECT_EQ(FieldLine(family, locations, "params[1].values[3]"), 9);  // one list
  EXPECT_EQ(FieldLine(family, locations, "buffers[1].shape[0]"), 21);
  EXPECT_EQ(FieldLine(family, locations, "buffers[1].shape[5]"), 21);
  EXPECT_EQ(FieldLine(family, locations, "buffers[1].fill.kind"), 23);
  EXPECT_EQ(FieldLine(family, locations, "reference.launch.block[0]"), 34);
  EXPECT_EQ(FieldLine(family, locations, "reference.source"), 32);
  EXPECT_EQ(FieldLine(family, locations, "dtypes[1]"), 12);
  EXPECT_EQ(FieldLine(family, locations, "launch.dynamic_shared_bytes"), 27);
  EXPECT_EQ(FieldLine(family, locations, "compile_options"), 0);
  EXPECT_EQ(FieldLine(family, locations, "no_such_field"), 0);
}

}  // namespace
}  // namespace autotune::kernels
