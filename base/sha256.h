// sha256 digests, the content keys of binaries, compiles and families.
#ifndef AUTOTUNE_BASE_SHA256_H_
#define AUTOTUNE_BASE_SHA256_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"

struct evp_md_ctx_st;

namespace autotune {

// Lower-case hex sha256 of `data` (64 characters).
std::string Sha256Hex(absl::string_view data);

// A sha256 over bytes given in pieces. Copies carry the state, so the
// digest of a long common prefix is computed once and each copy goes on
// with its own suffix:
//
//   Sha256 prefix;
//   prefix.Update(source);
//   Sha256 one = prefix;
//   one.Update(suffix);
//   std::string key = one.HexDigest();  // == Sha256Hex(source + suffix)
class Sha256 {
 public:
  Sha256();
  Sha256(const Sha256& other);
  Sha256& operator=(const Sha256& other);
  ~Sha256();

  void Update(absl::string_view data);
  // The digest of everything given so far; the state is left as it was.
  std::string HexDigest() const;

 private:
  struct Free {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, Free> ctx_;
};

}  // namespace autotune

#endif  // AUTOTUNE_BASE_SHA256_H_
