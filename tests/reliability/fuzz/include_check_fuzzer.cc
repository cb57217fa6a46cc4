// The include check (kernels/include_check.h) against NVRTC's own
// preprocessor: a source the check allows is compiled by the real NVRTC,
// with the shipped headers and, under names that are not shipped, canary
// headers whose only line is an #error that names them, in memory, in the
// folder of the program's source, beside the toolkit folder and above it.
// NVRTC gets the options every compile gets (-I<toolkit>, -no-source-include)
// and a small stand-in for the toolkit's folder, so an execution takes
// milliseconds. Whenever NVRTC's log shows a canary included while the
// check allowed the source, the target aborts.
#include <dlfcn.h>
#include <nvrtc.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/gpu/compiler.h"
#include "kernels/include_check.h"
#include "tests/reliability/fuzz/fuzz_file.h"

namespace {

// The text of every canary's #error: NVRTC prints it as written, and no
// source that does not hold it can print it (#error expands no macro).
constexpr char kCanary[] = "CANARY_8d1f0c";
constexpr size_t kMaxInputBytes = 48 * 1024;  // the largest built-in .cu is 38 KiB

struct Nvrtc {
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
};

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::trunc) << text;
}

std::string CanaryText(const std::string& where) {
  return absl::StrCat("#error ", kCanary, " ", where, "\n");
}

struct Setup {
  Nvrtc nvrtc;
  autotune::kernels::IncludeRules rules;
  std::vector<std::string> header_names;  // shipped, then canaries
  std::vector<std::string> header_texts;
  std::vector<std::string> options;
  std::string program_name;
};

// NVRTC (as the compile workers load it), the toolkit stand-in and the
// canaries, once.
const Setup& TheSetup() {
  static const Setup* setup = [] {
    auto* s = new Setup;
    absl::StatusOr<const autotune::kernels::Nvrtc*> loaded = autotune::kernels::Nvrtc::Load();
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
      std::abort();
    }
    void* handle = dlopen((*loaded)->path().c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) std::abort();
    s->nvrtc.create =
        reinterpret_cast<decltype(s->nvrtc.create)>(dlsym(handle, "nvrtcCreateProgram"));
    s->nvrtc.compile =
        reinterpret_cast<decltype(s->nvrtc.compile)>(dlsym(handle, "nvrtcCompileProgram"));
    s->nvrtc.log_size =
        reinterpret_cast<decltype(s->nvrtc.log_size)>(dlsym(handle, "nvrtcGetProgramLogSize"));
    s->nvrtc.log = reinterpret_cast<decltype(s->nvrtc.log)>(dlsym(handle, "nvrtcGetProgramLog"));
    s->nvrtc.destroy =
        reinterpret_cast<decltype(s->nvrtc.destroy)>(dlsym(handle, "nvrtcDestroyProgram"));
    if (!s->nvrtc.create || !s->nvrtc.compile || !s->nvrtc.log_size || !s->nvrtc.log ||
        !s->nvrtc.destroy) {
      std::abort();
    }

    const std::string root = autotune::fuzz::FuzzDirectory();
    // A toolkit folder of a few tiny headers; canaries beside it and above.
    const std::string toolkit = root + "/cuda/include";
    Write(toolkit + "/cuda_fp16.h", "#pragma once\nstruct __half { unsigned short x; };\n");
    Write(toolkit + "/cuda_bf16.h", "#pragma once\nstruct __nv_bfloat16 { unsigned short x; };\n");
    Write(toolkit + "/crt/detail.h", "#pragma once\n#define AUTOTUNE_FUZZ_TOOLKIT 1\n");
    Write(root + "/cuda/secret.h", CanaryText("beside the toolkit"));
    Write(root + "/secret.h", CanaryText("above the toolkit"));
    Write(root + "/abs.h", CanaryText("absolute"));
    // The folder of the program's source (its name's folder; the working
    // directory for a bare name), which NVRTC must never search.
    const std::string work = root + "/work";
    for (const char* name : {"x.h", "a.h", "etc/passwd", "tile.cuh.h", "detail.h"}) {
      Write(work + "/" + name, CanaryText(absl::StrCat("source folder ", name)));
    }
    s->program_name = work + "/fuzz.cu";
    s->rules.toolkit_include_dir = toolkit;

    s->rules.shipped = {"tile.cuh", "detail/mma.cuh"};
    s->header_names = s->rules.shipped;
    s->header_texts = {"#pragma once\n#define TILE 4\n", "#pragma once\n#include \"tile.cuh\"\n"};
    for (const char* name : {"x.h", "a.h", "etc/passwd", "/etc/passwd", "../x.h", "./tile.cuh",
                             "detail/../tile.cuh", "cuda_fp16.hpp", "mma.cuh", "tile.cuh "}) {
      s->header_names.push_back(name);
      s->header_texts.push_back(CanaryText(absl::StrCat("in memory ", name)));
    }
    s->options = {"-arch=sm_90", "-I" + toolkit, "-no-source-include", "-default-device"};
    return s;
  }();
  return *setup;
}

// The source with its line splices joined, as NVRTC reads it before an
// #error prints its line.
std::string Joined(const std::string& source) {
  std::string joined;
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\\') {
      size_t after = i + 1;
      while (after < source.size() && source[after] == '\r') ++after;
      if (after < source.size() && source[after] == '\n') {
        i = after;
        continue;
      }
    }
    joined.push_back(source[i]);
  }
  return joined;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInputBytes) return 0;
  const Setup& setup = TheSetup();
  const std::string source(reinterpret_cast<const char*>(data), size);
  if (autotune::kernels::FindForbiddenInclude(source, setup.rules).has_value()) return 0;
  // A source that prints the canary's text itself proves nothing.
  if (Joined(source.substr(0, source.find('\0'))).find(kCanary) != std::string::npos) return 0;

  std::vector<const char*> names;
  std::vector<const char*> texts;
  for (size_t i = 0; i < setup.header_names.size(); ++i) {
    names.push_back(setup.header_names[i].c_str());
    texts.push_back(setup.header_texts[i].c_str());
  }
  std::vector<const char*> options;
  for (const std::string& option : setup.options) options.push_back(option.c_str());
  nvrtcProgram program = nullptr;
  if (setup.nvrtc.create(&program, source.c_str(), setup.program_name.c_str(),
                         static_cast<int>(names.size()), texts.data(),
                         names.data()) != NVRTC_SUCCESS) {
    return 0;
  }
  setup.nvrtc.compile(program, static_cast<int>(options.size()), options.data());
  size_t log_size = 0;
  std::string log;
  if (setup.nvrtc.log_size(program, &log_size) == NVRTC_SUCCESS && log_size > 0) {
    log.resize(log_size);
    if (setup.nvrtc.log(program, log.data()) != NVRTC_SUCCESS) log.clear();
  }
  setup.nvrtc.destroy(&program);
  if (log.find(kCanary) != std::string::npos) {
    std::fprintf(stderr,
                 "the include check allowed a source that made NVRTC include a canary:\n%s\n",
                 log.c_str());
    std::abort();
  }
  return 0;
}
