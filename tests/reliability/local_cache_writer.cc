// local-cache-writer DIR: writes answers and cubins into the client's local
// cache at DIR (client/local_cache.h) for ever, as a client would. For
// crash_test.cc, which kills it at random moments. Answer i is for the
// problem n=i of family "crash"; its cubin is 256 KiB of bytes derived from
// i and the round, so that a rewrite changes every file. Once its first
// answer is written it writes one byte to stdout: from then on a kill lands
// in the middle of writing, however long the process took to start.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "client/local_cache.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: local-cache-writer DIR\n");
    return 2;
  }
  absl::StatusOr<autotune::client::LocalCache> cache = autotune::client::LocalCache::Open(argv[1]);
  if (!cache.ok()) {
    std::fprintf(stderr, "local-cache-writer: %s\n", std::string(cache.status().message()).c_str());
    return 1;
  }
  for (int round = 0;; ++round) {
    for (int i = 0; i < 16; ++i) {
      std::string cubin(256 << 10, static_cast<char>(i));
      for (size_t at = 0; at < cubin.size(); at += 4096) cubin[at] = static_cast<char>(round);
      const std::string sha256 = autotune::Sha256Hex(cubin);
      autotune::v1::LocalAnswer answer;
      autotune::v1::LookupRequest* request = answer.mutable_request();
      request->set_family("crash");
      (*request->mutable_problem()->mutable_dims())["n"] = i;
      request->mutable_problem()->set_dtype(autotune::v1::FLOAT32);
      answer.mutable_response()->mutable_entry()->set_binary_sha256(sha256);
      answer.mutable_response()->mutable_entry()->set_tuned_at(absl::StrCat("round ", round));
      if (!cache->PutCubin(sha256, cubin).ok() || !cache->PutAnswer(answer).ok()) return 1;
      if (round == 0 && i == 0) {
        std::fputc('w', stdout);
        std::fflush(stdout);
      }
    }
  }
}
