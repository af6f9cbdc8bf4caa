// Integrity and authenticity of plan files, shared by the writer (graphc's
// plan export) and the reader (the runtime's loader), so that both compute the
// same bytes the same way (libsodium: SHA-256, Ed25519).
//
//  - Plan.digest is SHA-256 of the whole file with the bytes of Plan.digest and
//    Plan.signature read as zeros; KernelBinary.sha256 is SHA-256 of its data.
//    They detect corruption (a flipped bit, a truncated copy, an edit).
//  - Plan.signature, when present, is an Ed25519 signature of
//    "graphc-plan-v1" || digest by the secret key whose public key is
//    Plan.signer. It proves who compiled the plan: `graphrun --trusted-keys`
//    runs only plans signed by one of the keys the user names.
//
// Neither makes a plan's code safe to run; they let a user run only the code
// they meant to.

#ifndef GRAPHC_CONTRACT_PLAN_INTEGRITY_H_
#define GRAPHC_CONTRACT_PLAN_INTEGRITY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "contract/status.h"

namespace graphc {

using Sha256Digest = std::array<uint8_t, 32>;
using PublicKey = std::array<uint8_t, 32>;
using SecretKey = std::array<uint8_t, 64>;  // libsodium's: seed, then public key
inline constexpr size_t kSignatureBytes = 64;

Sha256Digest Sha256Of(const uint8_t* data, size_t size);
std::string HexOf(const uint8_t* data, size_t size);
template <size_t N>
std::string HexOf(const std::array<uint8_t, N>& bytes) {
  return HexOf(bytes.data(), N);
}

// The digest of a FlatBuffers-verified plan (see above); fails when the plan
// has no 32-byte digest or a signature that is neither absent nor 64 bytes.
StatusOr<Sha256Digest> ComputePlanDigest(const uint8_t* bytes, size_t size);

// Fills in the digest of a finished plan (written with a 32-byte digest of
// zeros) and, when `key` is given, its signature (written with 64 zero bytes
// and signer = key's public key).
Status SealPlan(uint8_t* bytes, size_t size, const SecretKey* key = nullptr);

// Checks Plan.digest and every KernelBinary.sha256 of a verified plan.
Status CheckPlanIntegrity(const uint8_t* bytes, size_t size);

// Succeeds when the plan is signed by one of `trusted` and the signature
// verifies; kPlanUntrusted otherwise, naming the signer (if any).
Status CheckPlanSignature(const uint8_t* bytes, size_t size,
                          const std::vector<PublicKey>& trusted);

// Key files: one line, "graphc-secret-key-v1 <128 hex digits>" (written with
// mode 0600) or "graphc-public-key-v1 <64 hex digits>".
Status GenerateKeyPair(const std::string& secret_path, const std::string& public_path);
StatusOr<SecretKey> ReadSecretKey(const std::string& path);
StatusOr<PublicKey> ReadPublicKey(const std::string& path);

// The public keys in a comma-separated list of key files (graphrun
// --trusted-keys); an error when a file cannot be read or the list names none.
StatusOr<std::vector<PublicKey>> ReadTrustedKeys(const std::string& key_files);
PublicKey PublicKeyOf(const SecretKey& key);

}  // namespace graphc

#endif  // GRAPHC_CONTRACT_PLAN_INTEGRITY_H_
