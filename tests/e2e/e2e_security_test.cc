// Families from a caller who may be an attacker, over the real daemon and
// the real CLI: no role gains another's power through Import, and a family
// that would make NVRTC read or write a host file is refused before anything
// compiles. Each test names the finding it guards (found on e01f360); each
// failed there.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/file.h"
#include "base/sha256.h"
#include "base/status_matchers.h"
#include "base/token.h"
#include "client/bundle.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/autotune.pb.h"
#include "proto/problem.h"
#include "tests/support/daemon_test.h"
#include "tests/support/process.h"
#include "tests/support/sample_bundle.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class SecurityTest : public DaemonTest {
 protected:
  void SetUp() override {
    std::string tokens;
    for (const auto& [role, holder] : std::map<std::string, std::string>{
             {"reader", "dash"}, {"tuner", "ci"}, {"admin", "ops"}}) {
      ASSERT_OK_AND_ASSIGN(const std::string token, NewToken());
      ASSERT_OK(WriteFileAtomically(Path(role + ".token"), token + "\n"));
      absl::StrAppend(&tokens, role, " ", holder, " ", TokenHash(token), "\n");
    }
    ASSERT_OK(WriteFileAtomically(Path("tokens"), tokens));
    // The socket's owner is no one special here: every call needs a token.
    ASSERT_OK(StartDaemon({"--kernels", "none", "--gpus", "none", "--token-file", Path("tokens"),
                           "--audit-log", Path("audit.log"), "--peer-role",
                           absl::StrCat("uid:", getuid(), "=none")}));
  }
  void TearDown() override { StopDaemon(); }

  CommandResult As(const std::string& role, std::vector<std::string> args) {
    args.insert(args.begin(), {"--token-file", Path(role + ".token")});
    return Cli(args);
  }

  // The quick start's sample bundle (family vector_scale, three entries).
  std::string SampleBundle(const std::function<void(v1::CacheBundle&)>& change = nullptr) {
    SampleBundleOptions options;
    options.entries = QuickstartEntries();
    options.cubin_kind = CubinKind::kSynthetic;
    options.synthetic_cubin_bytes = 1024;
    absl::StatusOr<v1::CacheBundle> bundle = MakeSampleBundle(options);
    EXPECT_OK(bundle.status());
    if (!bundle.ok()) return "";
    if (change) change(*bundle);
    const std::string path = Path(absl::StrCat("bundle", ++bundles_, ".json"));
    EXPECT_OK(client::WriteBundleFile(path, *bundle));
    return path;
  }

  // A change to the sample's first entry and the message its import gets.
  using PlantedEntry = std::pair<std::function<void(v1::Entry&)>, std::string>;
  // Imports the sample once per case, the case's change made to its first
  // entry, as `role` with `flag`: each import fails with the case's message.
  void ExpectEachImportRefused(const std::string& role, const std::string& flag,
                               const std::vector<PlantedEntry>& cases) {
    for (const auto& [change, message] : cases) {
      const auto& plant = change;  // a lambda may not capture a structured binding (clang 14)
      const std::string bundle =
          SampleBundle([&plant](v1::CacheBundle& b) { plant(*b.mutable_entries(0)); });
      CommandResult refused = As(role, {"import", bundle, flag});
      EXPECT_NE(refused.exit_code, 0) << message;
      EXPECT_THAT(refused.err, HasSubstr(message));
    }
  }

  std::string Audit() const {
    absl::StatusOr<std::string> text = ReadFile(Path("audit.log"));
    return text.ok() ? *text : "";
  }

  // A copy of the small test family, its source and descriptor changed.
  std::string Family(const std::string& source_prefix, const std::string& extra_fields) {
    const std::string testdata = AUTOTUNE_KERNELS_TESTDATA;
    absl::StatusOr<std::string> descriptor = ReadFile(testdata + "/good/axpy.textproto");
    absl::StatusOr<std::string> source = ReadFile(testdata + "/good/axpy.cu");
    EXPECT_OK(descriptor.status());
    EXPECT_OK(source.status());
    if (!descriptor.ok() || !source.ok()) return "";
    EXPECT_OK(WriteFileAtomically(Path("axpy.cu"), source_prefix + *source));
    EXPECT_OK(WriteFileAtomically(Path("axpy.textproto"), *descriptor + extra_fields));
    return Path("axpy.textproto");
  }

 public:
  std::string TokenPath(const std::string& role) const { return Path(role + ".token"); }
  const std::string& daemon_address() const { return daemon_->address(); }

 protected:
  int bundles_ = 0;
};

// Finding: Import took the tuner role and stored a family after checking
// only its name and hash, so a tuner replaced a family's source.
TEST_F(SecurityTest, ATunerCannotAddOrReplaceAFamilyThroughImport) {
  const std::string bundle = SampleBundle();
  CommandResult refused = As("tuner", {"import", bundle});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("PERMISSION_DENIED: families[0]: importing family "
                                     "'vector_scale' version"));
  EXPECT_THAT(refused.err,
              HasSubstr("would add that version; adding or replacing a family needs the admin "
                        "role; token:ci has tuner"));
  CommandResult kernels = As("reader", {"kernels"});
  EXPECT_THAT(kernels.out, Not(HasSubstr("vector_scale")));
  EXPECT_THAT(As("reader", {"ls"}).out, Not(HasSubstr("vector_scale")));
  // One JSON line, its fields in no fixed order.
  EXPECT_THAT(Audit(), HasSubstr("\"caller\":\"token:ci\""));
  EXPECT_THAT(Audit(), HasSubstr("\"code\":\"PERMISSION_DENIED\""));
  EXPECT_THAT(Audit(), HasSubstr("families vector_scale@"));

  // The admin may; then the tuner's import of the same family changes none.
  CommandResult admin = As("admin", {"import", bundle});
  ASSERT_EQ(admin.exit_code, 0) << admin.err;
  CommandResult again = As("tuner", {"import", bundle});
  EXPECT_EQ(again.exit_code, 0) << again.err;

  // Another source under the same name, made current with --replace: the
  // admin's call again.
  const std::string other = SampleBundle([](v1::CacheBundle& b) {
    v1::KernelFamily& family = *b.mutable_families(0)->mutable_family();
    family.set_source(family.source() + "\n// changed\n");
    const std::string hash = FamilyContentHash(family);
    b.mutable_families(0)->set_content_hash(hash);
    for (v1::Entry& entry : *b.mutable_entries()) entry.set_family_hash(hash);
    for (v1::Binary& binary : *b.mutable_binaries()) binary.set_family_hash(hash);
  });
  CommandResult replaced = As("tuner", {"import", other, "--replace"});
  EXPECT_NE(replaced.exit_code, 0);
  EXPECT_THAT(replaced.err, HasSubstr("needs the admin role; token:ci has tuner"));
}

// Finding: Import skipped RegisterKernel's checks (a kernel name that is no
// identifier, any compile option, 2^70 configs were all stored).
TEST_F(SecurityTest, AnImportedFamilyPassesTheChecksOfRegisterKernel) {
  const std::string bad_option = SampleBundle([](v1::CacheBundle& b) {
    b.mutable_families(0)->mutable_family()->add_compile_options("--create-pch=" +
                                                                 std::string("/tmp/x"));
  });
  CommandResult refused = As("admin", {"import", bad_option});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("INVALID_ARGUMENT: families[0].family: compile_options[0]: "
                                     "'--create-pch=/tmp/x' is not an allowed NVRTC option"));
  const std::string bad_name = SampleBundle([](v1::CacheBundle& b) {
    b.mutable_families(0)->mutable_family()->set_kernel_name("k(); system");
  });
  refused = As("admin", {"import", bad_name});
  EXPECT_THAT(refused.err,
              HasSubstr("families[0].family: kernel_name: 'k(); system' is not a C++ identifier"));
  EXPECT_THAT(As("reader", {"kernels"}).out, Not(HasSubstr("vector_scale")));
}

// Finding: imported entries were stored and served unchecked: NaN timings
// (which --keep-better could never displace), INT64_MIN dims, configs
// outside the family's space, 20 MB device names.
TEST_F(SecurityTest, ImportedEntriesAreCheckedAgainstTheirFamily) {
  ASSERT_EQ(As("admin", {"import", SampleBundle()}).exit_code, 0);
  const std::vector<PlantedEntry> cases = {
      {[](v1::Entry& e) { e.mutable_timing()->set_median_us(std::nan("")); },
       "entries[0].timing.median_us is nan; timings are finite and >= 0"},
      {[](v1::Entry& e) { e.mutable_timing()->set_median_us(0); },
       "entries[0].timing.median_us is 0; an entry's median is > 0"},
      {[](v1::Entry& e) {
         (*e.mutable_problem()->mutable_dims())["n"] = std::numeric_limits<int64_t>::min();
       },
       "entries[0].problem"},
      {[](v1::Entry& e) { (*e.mutable_config()->mutable_params())["BLOCK"] = 12345; },
       "entries[0].config: "},
      {[](v1::Entry& e) { e.mutable_device()->set_name(std::string(300, 'G')); },
       "entries[0].device.name: 300 bytes, more than the limit of 256"},
  };
  ExpectEachImportRefused("admin", "--replace", cases);
  // Nothing of them was stored: the entries are still the sample's.
  CommandResult listed = As("reader", {"ls", "--json"});
  EXPECT_THAT(listed.out, Not(HasSubstr("GGGG")));
  EXPECT_THAT(listed.out, Not(HasSubstr("NaN")));
}

// Finding: compile options reached NVRTC unchecked; --create-pch=PATH
// truncated any file the daemon's user could write (the audit log).
TEST_F(SecurityTest, ACompileOptionThatWritesAFileIsRefusedAtRegistration) {
  const std::string victim = Path("victim.txt");
  ASSERT_OK(WriteFileAtomically(victim, "keep me\n"));
  for (const std::string& option : {"--create-pch=" + victim, "--time=" + victim,
                                    "--fdevice-time-trace=" + victim, "-I" + dir_.path()}) {
    const std::string family = Family("", absl::StrCat("compile_options: \"", option, "\"\n"));
    CommandResult refused = As("admin", {"register", family});
    EXPECT_NE(refused.exit_code, 0) << option;
    EXPECT_THAT(refused.err, HasSubstr(absl::StrCat("compile_options[0]: '", option,
                                                    "' is not an allowed NVRTC option")));
  }
  ASSERT_OK_AND_ASSIGN(const std::string kept, ReadFile(victim));
  EXPECT_EQ(kept, "keep me\n");
  EXPECT_THAT(As("reader", {"kernels"}).out, Not(HasSubstr("axpy")));
}

// Finding: #include "/abs/path" made NVRTC read a 0600 file, whose lines
// came back in the job's progress and error.
TEST_F(SecurityTest, ASourceThatIncludesAHostFileIsRefusedAndLeaksNothing) {
  const std::string secret = Path("secret.key");
  ASSERT_OK(WriteFileAtomically(secret, "TOPSECRET-7f3a\n"));
  for (const std::string& include :
       {absl::StrCat("#include \"", secret, "\"\n"),
        absl::StrCat("#include <../../../../../../..", secret, ">\n"),
        absl::StrCat("#define SECRET \"", secret, "\"\n#include SECRET\n")}) {
    const std::string family = Family(include, "");
    CommandResult refused = As("admin", {"register", family});
    EXPECT_NE(refused.exit_code, 0) << include;
    EXPECT_THAT(refused.err, HasSubstr("source: line ")) << include;
    EXPECT_THAT(refused.err, Not(HasSubstr("TOPSECRET"))) << include;
  }
  // Nothing was compiled, stored or logged with the secret's bytes.
  EXPECT_THAT(As("reader", {"kernels"}).out, Not(HasSubstr("axpy")));
  EXPECT_THAT(As("reader", {"jobs", "--json"}).out, Not(HasSubstr("TOPSECRET")));
  EXPECT_THAT(daemon_->Stderr(), Not(HasSubstr("TOPSECRET")));
  EXPECT_THAT(Audit(), Not(HasSubstr("TOPSECRET")));
}

// A client of the daemon holding `role`'s token.
std::unique_ptr<client::Client> ClientAs(const SecurityTest& test, const std::string& address,
                                         const std::string& role);

// Finding (2bc4d71): Import checked an entry's config but stored its launch,
// function name and binary as they came; a reader's Lookup answered EXACT
// with a tuner's grid of 2^31-1 x 65535 x 65535, 1 TiB of shared memory, a
// tensor map on buffer 7, symbol 'attacker_symbol' and bytes that were no
// cubin, and GetBinaries returned those bytes.
TEST_F(SecurityTest, WhatATunerPlantsIsRefusedNamingTheField) {
  ASSERT_EQ(As("admin", {"import", SampleBundle()}).exit_code, 0);
  const std::vector<PlantedEntry> cases = {
      {[](v1::Entry& e) {
         e.mutable_launch()->clear_grid();
         for (int64_t v : {int64_t{2147483647}, int64_t{65535}, int64_t{65535}}) {
           e.mutable_launch()->add_grid(v);
         }
       },
       "entries[0].launch.grid: (2147483647, 65535, 65535) is not the launch family "
       "'vector_scale' computes"},
      {[](v1::Entry& e) {
         e.mutable_launch()->clear_block();
         for (int64_t v : {1024, 1024, 64}) e.mutable_launch()->add_block(v);
       },
       "entries[0].launch.block: (1024, 1024, 64)"},
      {[](v1::Entry& e) { e.mutable_launch()->set_dynamic_shared_bytes(int64_t{1} << 40); },
       "entries[0].launch.dynamic_shared_bytes: 1099511627776"},
      {[](v1::Entry& e) {
         v1::TensorMapLayout* map = e.mutable_launch()->add_tensor_maps();
         map->set_buffer(7);
         map->add_shape(int64_t{1} << 40);
       },
       "entries[0].launch.tensor_maps: 1 maps"},
      {[](v1::Entry& e) { e.set_function_name("attacker_symbol"); },
       "entries[0].function_name: 'attacker_symbol' is not the kernel this config compiles to"},
      {[](v1::Entry& e) { e.mutable_device()->set_name(std::string("H200\x1b[2J\0", 9)); },
       "entries[0].device.name: holds the control character U+001B at byte 4"},
  };
  ExpectEachImportRefused("tuner", "--keep-better", cases);
  CommandResult listed = As("reader", {"ls", "--json"});
  EXPECT_THAT(listed.out, Not(HasSubstr("2147483647")));
  EXPECT_THAT(listed.out, Not(HasSubstr("attacker_symbol")));
}

// Finding (2bc4d71): a binary was checked only against its own sha256, so a
// reader was served whatever bytes a tuner imported. Now a reader gets this
// daemon's own compile of the config, and the foreign bytes are not stored.
TEST_F(SecurityTest, AForeignCubinNeverReachesAReader) {
  ASSERT_EQ(As("admin", {"import", SampleBundle()}).exit_code, 0);
  absl::StatusOr<v1::CacheBundle> planted = [] {
    SampleBundleOptions options;
    options.entries = QuickstartEntries();
    options.cubin_kind = CubinKind::kSynthetic;
    options.synthetic_cubin_bytes = 4096;
    return MakeSampleBundle(options);
  }();
  ASSERT_OK(planted.status());
  const std::string foreign = planted->binaries(0).sha256();
  const std::string path = Path("planted.json");
  ASSERT_OK(client::WriteBundleFile(path, *planted));
  CommandResult imported = As("tuner", {"import", path, "--replace"});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_THAT(imported.out, HasSubstr("imported binaries were not what this daemon compiles"));
  EXPECT_THAT(imported.out, HasSubstr(foreign.substr(0, 12)));

  std::unique_ptr<client::Client> reader = ClientAs(*this, daemon_address(), "reader");
  ASSERT_NE(reader, nullptr);
  v1::LookupRequest request;
  request.set_family("vector_scale");
  *request.mutable_problem() = planted->entries(0).problem();
  *request.mutable_device() = planted->entries(0).device();
  request.set_include_cubin(true);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse answer, reader->Lookup(request));
  ASSERT_EQ(answer.match(), v1::EXACT) << answer.ShortDebugString();
  EXPECT_NE(answer.entry().binary_sha256(), foreign);
  EXPECT_TRUE(absl::StartsWith(answer.cubin(),
                               "\x7f"
                               "ELF"))
      << "not an ELF image";
  EXPECT_EQ(Sha256Hex(answer.cubin()), answer.entry().binary_sha256());
  EXPECT_THAT(answer.entry().function_name(), HasSubstr("vector_scale"));
  v1::GetBinariesRequest binaries;
  binaries.add_sha256(foreign);
  ASSERT_OK_AND_ASSIGN(v1::GetBinariesResponse served,
                       reader->GetBinaries(binaries, absl::Seconds(10)));
  EXPECT_EQ(served.binaries_size(), 0);
  EXPECT_THAT(served.missing(), ::testing::ElementsAre(foreign));
}

// Finding (2bc4d71): a tuner stored three 40 MiB blobs no entry named, and
// readers could download them.
TEST_F(SecurityTest, ABinaryNoEntryNamesIsRefused) {
  ASSERT_EQ(As("admin", {"import", SampleBundle()}).exit_code, 0);
  std::string blob_sha;
  const std::string bundle = SampleBundle([&blob_sha](v1::CacheBundle& b) {
    v1::Binary* blob = b.add_binaries();
    blob->set_cubin(std::string(4 << 20, 'z'));
    blob->set_sha256(Sha256Hex(blob->cubin()));
    blob_sha = blob->sha256();
  });
  CommandResult refused = As("tuner", {"import", bundle});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err,
              HasSubstr("binaries[1]: no entry of the bundle names binary " + blob_sha));
}

// Finding (2bc4d71): Import compiled a tuner's new family before checking
// the role: '#error' came back quoted in INVALID_ARGUMENT, and a macro
// expansion held a compile worker for minutes.
TEST_F(SecurityTest, ATunersNewFamilyIsRefusedBeforeItCompiles) {
  const std::string bundle = SampleBundle([](v1::CacheBundle& b) {
    v1::KernelFamily& family = *b.mutable_families(0)->mutable_family();
    family.set_source("#error planted by a tuner\n" + family.source());
    const std::string hash = FamilyContentHash(family);
    b.mutable_families(0)->set_content_hash(hash);
    for (v1::Entry& entry : *b.mutable_entries()) entry.set_family_hash(hash);
  });
  CommandResult refused = As("tuner", {"import", bundle});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("PERMISSION_DENIED: families[0]"));
  EXPECT_THAT(refused.err, Not(HasSubstr("planted")));
}

std::unique_ptr<client::Client> ClientAs(const SecurityTest& test, const std::string& address,
                                         const std::string& role) {
  absl::StatusOr<std::string> token = ReadFile(test.TokenPath(role));
  if (!token.ok()) return nullptr;
  client::ClientOptions options;
  options.address = address;
  options.token = std::string(absl::StripAsciiWhitespace(*token));
  absl::StatusOr<std::unique_ptr<client::Client>> made = client::Client::Connect(options);
  return made.ok() ? *std::move(made) : nullptr;
}

}  // namespace
}  // namespace autotune::testing
