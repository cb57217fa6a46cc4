#include "base/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

#include "absl/strings/escaping.h"

namespace autotune {
namespace {

// The EVP calls below fail only when OpenSSL cannot allocate; there is no
// sensible digest to return then.
void Check(int ok) {
  if (ok != 1) std::abort();
}

// SHA-256, fetched once: with EVP_sha256() OpenSSL 3 looks the
// implementation up again in every EVP_Digest call, which costs as much as
// hashing a small key.
const EVP_MD* Sha256Md() {
  static const EVP_MD* const md = [] {
    EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    if (fetched == nullptr) std::abort();
    return fetched;
  }();
  return md;
}

std::string Hex(const unsigned char* digest, unsigned int length) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  Check(EVP_Digest(data.data(), data.size(), digest, &length, Sha256Md(), nullptr));
  return Hex(digest, length);
}

void Sha256::Free::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) std::abort();
  Check(EVP_DigestInit_ex(ctx_.get(), Sha256Md(), nullptr));
}

Sha256::Sha256(const Sha256& other) : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) std::abort();
  Check(EVP_MD_CTX_copy_ex(ctx_.get(), other.ctx_.get()));
}

Sha256& Sha256::operator=(const Sha256& other) {
  if (this != &other) Check(EVP_MD_CTX_copy_ex(ctx_.get(), other.ctx_.get()));
  return *this;
}

Sha256::~Sha256() = default;

void Sha256::Update(absl::string_view data) {
  Check(EVP_DigestUpdate(ctx_.get(), data.data(), data.size()));
}

std::string Sha256::HexDigest() const {
  Sha256 copy = *this;  // EVP_DigestFinal_ex ends the context it is given
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  Check(EVP_DigestFinal_ex(copy.ctx_.get(), digest, &length));
  return Hex(digest, length);
}

}  // namespace autotune
