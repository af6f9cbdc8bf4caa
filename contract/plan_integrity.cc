// Plan digests, kernel hashes, signatures and key files (see plan_integrity.h).

#include "contract/plan_integrity.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>

#include "contract/printable.h"
#include "contract/schema/plan_generated.h"

namespace graphc {
namespace {

constexpr const char kSignatureContext[] = "graphc-plan-v1";
constexpr const char kSecretKeyTag[] = "graphc-secret-key-v1";
constexpr const char kPublicKeyTag[] = "graphc-public-key-v1";

static_assert(crypto_hash_sha256_BYTES == 32);
static_assert(crypto_sign_BYTES == kSignatureBytes);
static_assert(crypto_sign_PUBLICKEYBYTES == 32 && crypto_sign_SECRETKEYBYTES == 64);

bool SodiumReady() {
  static const bool ready = sodium_init() >= 0;
  return ready;
}

Status Integrity(const std::string& message) {
  return Status(ErrorCode::kPlanIntegrity, message);
}

// The byte range of a vector inside the buffer, or {0, 0} when absent.
struct Range {
  size_t begin = 0, size = 0;
};
Range RangeOf(const uint8_t* bytes, const flatbuffers::Vector<uint8_t>* v) {
  if (v == nullptr) return {};
  return {static_cast<size_t>(v->data() - bytes), v->size()};
}

std::array<uint8_t, 14 + 32> SignedMessage(const Sha256Digest& digest) {
  std::array<uint8_t, 14 + 32> message;
  static_assert(sizeof(kSignatureContext) - 1 == 14);
  std::memcpy(message.data(), kSignatureContext, 14);
  std::memcpy(message.data() + 14, digest.data(), 32);
  return message;
}

bool ParseHex(const std::string& text, uint8_t* out, size_t bytes) {
  if (text.size() != 2 * bytes) return false;
  size_t written = 0;
  return sodium_hex2bin(out, bytes, text.data(), text.size(), nullptr, &written, nullptr) == 0 &&
         written == bytes;
}

// Reads a key file: one line "<tag> <hex>" and nothing else.
Status ReadKeyFile(const std::string& path, const char* tag, uint8_t* out, size_t bytes) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
  const std::string shown = Printable(path);
  if (fd < 0) return Status(ErrorCode::kIo, shown + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 1024) {
    close(fd);
    return Status(ErrorCode::kIo, shown + ": not a key file (not a small regular file)");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  ssize_t got = read(fd, text.data(), text.size());
  close(fd);
  if (got != static_cast<ssize_t>(text.size()))
    return Status(ErrorCode::kIo, shown + ": cannot read");
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const std::string prefix = std::string(tag) + " ";
  if (text.compare(0, prefix.size(), prefix) != 0 ||
      !ParseHex(text.substr(prefix.size()), out, bytes))
    return Status(ErrorCode::kInvalidArgument,
                  shown + ": not a " + tag + " file (expected one line: " + tag + " <" +
                      std::to_string(2 * bytes) + " hex digits>)");
  return Status::Ok();
}

Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode) {
  // O_EXCL: never overwrite a key (losing a secret key loses the identity).
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    return Status(ErrorCode::kIo, Printable(path) + ": cannot create (" + std::strerror(errno) +
                                      (errno == EEXIST ? "; keys are never overwritten" : "") +
                                      ")");
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok) {
    unlink(path.c_str());
    return Status(ErrorCode::kIo, Printable(path) + ": cannot write");
  }
  return Status::Ok();
}

}  // namespace

Sha256Digest Sha256Of(const uint8_t* data, size_t size) {
  Sha256Digest digest;
  SodiumReady();
  crypto_hash_sha256(digest.data(), data, size);
  return digest;
}

std::string HexOf(const uint8_t* data, size_t size) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * size);
  for (size_t i = 0; i < size; ++i) {
    hex += digits[data[i] >> 4];
    hex += digits[data[i] & 15];
  }
  return hex;
}

StatusOr<Sha256Digest> ComputePlanDigest(const uint8_t* bytes, size_t size) {
  if (!SodiumReady()) return Status(ErrorCode::kInternal, "libsodium failed to initialize");
  const fb::Plan* plan = fb::GetPlan(bytes);
  Range digest = RangeOf(bytes, plan->digest());
  Range signature = RangeOf(bytes, plan->signature());
  if (digest.size != 32)
    return Integrity("the plan has no SHA-256 digest (written by an older or foreign tool)");
  if (signature.size != 0 && signature.size != kSignatureBytes)
    return Integrity("the plan's signature is " + std::to_string(signature.size) +
                     " bytes, not " + std::to_string(kSignatureBytes));
  // Hash the file in order, with the two ranges replaced by zeros. The
  // Verifier lets two vectors share bytes; these two must not.
  if (signature.size != 0 && digest.begin < signature.begin + signature.size &&
      signature.begin < digest.begin + digest.size)
    return Integrity("the plan's digest and signature overlap (a crafted plan)");
  Range holes[2] = {digest, signature};
  if (signature.size != 0 && signature.begin < digest.begin) std::swap(holes[0], holes[1]);
  static const uint8_t kZeros[kSignatureBytes] = {};
  crypto_hash_sha256_state state;
  crypto_hash_sha256_init(&state);
  size_t at = 0;
  for (const Range& hole : holes) {
    if (hole.size == 0) continue;
    crypto_hash_sha256_update(&state, bytes + at, hole.begin - at);
    crypto_hash_sha256_update(&state, kZeros, hole.size);
    at = hole.begin + hole.size;
  }
  crypto_hash_sha256_update(&state, bytes + at, size - at);
  Sha256Digest out;
  crypto_hash_sha256_final(&state, out.data());
  return out;
}

Status SealPlan(uint8_t* bytes, size_t size, const SecretKey* key) {
  flatbuffers::Verifier verifier(bytes, size);
  if (!fb::VerifyPlanBuffer(verifier)) return Integrity("cannot seal: not a valid plan buffer");
  const fb::Plan* plan = fb::GetPlan(bytes);
  Range signature = RangeOf(bytes, plan->signature());
  if (key != nullptr) {
    PublicKey expected = PublicKeyOf(*key);
    if (signature.size != kSignatureBytes || plan->signer() == nullptr ||
        plan->signer()->size() != 32 ||
        std::memcmp(plan->signer()->data(), expected.data(), 32) != 0)
      return Integrity("cannot sign: the plan was not written with room for this key's signature");
  }
  StatusOr<Sha256Digest> digest = ComputePlanDigest(bytes, size);
  if (!digest.ok()) return digest.status();
  std::memcpy(bytes + RangeOf(bytes, plan->digest()).begin, digest->data(), 32);
  if (key != nullptr) {
    auto message = SignedMessage(*digest);
    crypto_sign_detached(bytes + signature.begin, nullptr, message.data(), message.size(),
                         key->data());
  }
  return Status::Ok();
}

Status CheckPlanIntegrity(const uint8_t* bytes, size_t size) {
  StatusOr<Sha256Digest> digest = ComputePlanDigest(bytes, size);
  if (!digest.ok()) return digest.status();
  const fb::Plan* plan = fb::GetPlan(bytes);
  if (sodium_memcmp(digest->data(), plan->digest()->data(), 32) != 0)
    return Integrity("SHA-256 mismatch: the file is corrupt (it records " +
                     HexOf(plan->digest()->data(), 32) + ", its bytes hash to " +
                     HexOf(*digest) + ")");
  if (plan->binaries())
    for (uint32_t i = 0; i < plan->binaries()->size(); ++i) {
      const fb::KernelBinary* binary = plan->binaries()->Get(i);
      const std::string name = "kernel binary " + std::to_string(i) + " (" +
                                fb::EnumNameTarget(binary->target()) + ")";
      if (binary->sha256() == nullptr || binary->sha256()->size() != 32)
        return Integrity(name + " has no SHA-256");
      if (binary->data() == nullptr) return Integrity(name + " has no data");
      Sha256Digest hash = Sha256Of(binary->data()->data(), binary->data()->size());
      if (sodium_memcmp(hash.data(), binary->sha256()->data(), 32) != 0)
        return Integrity(name + ": SHA-256 mismatch: the kernel code is corrupt (it records " +
                         HexOf(binary->sha256()->data(), 32) + ", the code hashes to " +
                         HexOf(hash) + ")");
    }
  return Status::Ok();
}

Status CheckPlanSignature(const uint8_t* bytes, size_t size,
                          const std::vector<PublicKey>& trusted) {
  const fb::Plan* plan = fb::GetPlan(bytes);
  if (plan->signature() == nullptr || plan->signature()->size() == 0)
    return Status(ErrorCode::kPlanUntrusted,
                  "the plan is not signed (compile it with graphc compile --sign-key KEY)");
  if (plan->signer() == nullptr || plan->signer()->size() != 32 ||
      plan->signature()->size() != kSignatureBytes)
    return Status(ErrorCode::kPlanUntrusted, "the plan's signature is malformed");
  PublicKey signer;
  std::memcpy(signer.data(), plan->signer()->data(), 32);
  bool known = false;
  for (const PublicKey& key : trusted) known = known || key == signer;
  if (!known)
    return Status(ErrorCode::kPlanUntrusted,
                  "the plan is signed by key " + HexOf(signer) + ", which is not trusted");
  StatusOr<Sha256Digest> digest = ComputePlanDigest(bytes, size);
  if (!digest.ok()) return digest.status();
  auto message = SignedMessage(*digest);
  if (crypto_sign_verify_detached(plan->signature()->data(), message.data(), message.size(),
                                  signer.data()) != 0)
    return Status(ErrorCode::kPlanUntrusted,
                  "the plan's signature by key " + HexOf(signer) + " does not verify");
  return Status::Ok();
}

PublicKey PublicKeyOf(const SecretKey& key) {
  PublicKey out;
  crypto_sign_ed25519_sk_to_pk(out.data(), key.data());
  return out;
}

Status GenerateKeyPair(const std::string& secret_path, const std::string& public_path) {
  if (!SodiumReady()) return Status(ErrorCode::kInternal, "libsodium failed to initialize");
  PublicKey pk;
  SecretKey sk;
  crypto_sign_keypair(pk.data(), sk.data());
  std::string secret = std::string(kSecretKeyTag) + " " + HexOf(sk) + "\n";
  sodium_memzero(sk.data(), sk.size());
  Status status = WriteNewFile(secret_path, secret, 0600);
  sodium_memzero(secret.data(), secret.size());
  if (!status.ok()) return status;
  status = WriteNewFile(public_path, std::string(kPublicKeyTag) + " " + HexOf(pk) + "\n", 0644);
  if (!status.ok()) unlink(secret_path.c_str());
  return status;
}

StatusOr<SecretKey> ReadSecretKey(const std::string& path) {
  SecretKey key;
  Status status = ReadKeyFile(path, kSecretKeyTag, key.data(), key.size());
  if (!status.ok()) return status;
  // The second half is the public key; a file whose halves disagree is corrupt.
  unsigned char seed[32], pk[32], sk[64];
  crypto_sign_ed25519_sk_to_seed(seed, key.data());
  crypto_sign_seed_keypair(pk, sk, seed);
  bool consistent = std::memcmp(sk, key.data(), 64) == 0;
  sodium_memzero(seed, sizeof(seed));
  sodium_memzero(sk, sizeof(sk));
  if (!consistent)
    return Status(ErrorCode::kInvalidArgument, Printable(path) + ": the secret key is corrupt");
  return key;
}

StatusOr<PublicKey> ReadPublicKey(const std::string& path) {
  PublicKey key;
  Status status = ReadKeyFile(path, kPublicKeyTag, key.data(), key.size());
  if (!status.ok()) return status;
  return key;
}

StatusOr<std::vector<PublicKey>> ReadTrustedKeys(const std::string& key_files) {
  std::vector<PublicKey> keys;
  std::stringstream list(key_files);
  for (std::string path; std::getline(list, path, ',');) {
    if (path.empty()) continue;
    StatusOr<PublicKey> key = ReadPublicKey(path);
    if (!key.ok()) return key.status();
    keys.push_back(*key);
  }
  if (keys.empty())
    return Status(ErrorCode::kInvalidArgument, "--trusted-keys names no key file");
  return keys;
}

}  // namespace graphc
