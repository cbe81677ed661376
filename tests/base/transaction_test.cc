#include "base/transaction.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/ed25519.h"
#include "base/sha256.h"
#include "gtest/gtest.h"
#include "proto/chain.pb.h"

namespace base {
namespace {

constexpr uint32_t kPartition = 7;

// The key whose seed is `i` repeated: the same for every run.
PrivateKey Key(int i) { return *PrivateKey::FromSeed(std::string(32, static_cast<char>(i))); }

node::chain::Transaction BaseTx() {
  node::chain::Transaction tx;
  tx.set_partition(kPartition);
  tx.set_nonce(1);
  tx.mutable_transfer()->set_to(Key(9).public_key().bytes());
  tx.mutable_transfer()->set_amount(5);
  return tx;
}

std::string Raw(const std::string& tx_bytes, const std::string& sig) {
  node::chain::SignedTransaction s;
  s.set_tx(tx_bytes);
  s.set_signature(sig);
  return s.SerializeAsString();
}

// Signs `tx` as is (sender not overwritten), so malformed senders can be built.
std::string SignRaw(const node::chain::Transaction& tx, const PrivateKey& key) {
  const std::string bytes = tx.SerializeAsString();
  return Raw(bytes, key.Sign(bytes));
}

TEST(TransactionTest, ValidDecodesAndVerifies) {
  const PrivateKey key = Key(1);
  const std::string bytes = SignTx(BaseTx(), key);
  TxLimits limits{.partition = kPartition};
  absl::StatusOr<DecodedTx> d = DecodeSignedTx(bytes, limits);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->hash, Sha256Bytes(bytes));
  EXPECT_EQ(d->signed_bytes, bytes);
  EXPECT_EQ(d->sender(), key.public_key().bytes());
  EXPECT_EQ(d->nonce(), 1u);
  EXPECT_EQ(d->size(), bytes.size());
  EXPECT_TRUE(VerifySignature(*d).ok());
}

struct BadCase {
  std::string name;
  std::function<std::string()> bytes;
  absl::StatusCode code;
  std::string prefix;
  bool at_verify = false;  // the error comes from VerifySignature, decode must pass
};

TEST(TransactionTest, EveryBadInputHasItsOwnError) {
  const PrivateKey key = Key(1);
  const PrivateKey other = Key(2);
  const std::string good = SignTx(BaseTx(), key);
  const auto malformed = absl::StatusCode::kInvalidArgument;
  const std::string kMalformed = "malformed transaction";
  std::vector<BadCase> cases = {
      {"oversize",
       [&] {
         auto tx = BaseTx();
         tx.mutable_put()->set_key("k");
         tx.mutable_put()->set_value(std::string(70 * 1024, 'v'));
         return SignTx(tx, key);
       },
       absl::StatusCode::kOutOfRange, "oversize transaction"},
      {"empty", [] { return std::string(); }, malformed, kMalformed},
      {"truncated", [&] { return good.substr(0, good.size() - 7); }, malformed, kMalformed},
      {"garbage", [] { return std::string("\xff\xff\xff\xff\x0f", 5); }, malformed, kMalformed},
      {"unknown field appended", [&] { return good + std::string("\x18\x01", 2); }, malformed,
       kMalformed},
      {"duplicated field", [&] { return good + Raw("", std::string(64, 's')); }, malformed,
       kMalformed},
      {"short signature", [&] { return Raw(BaseTx().SerializeAsString(), std::string(63, 's')); },
       malformed, kMalformed},
      {"missing payload", [&] { return Raw("", std::string(64, 's')); }, malformed, kMalformed},
      {"payload not a tx", [&] { return Raw("\xff\xff\xff", std::string(64, 's')); }, malformed,
       kMalformed},
      {"short sender",
       [&] {
         auto tx = BaseTx();
         tx.set_sender(std::string(31, 'a'));
         return SignRaw(tx, key);
       },
       malformed, kMalformed},
      {"no operation",
       [&] {
         auto tx = BaseTx();
         tx.clear_transfer();
         return SignTx(tx, key);
       },
       malformed, kMalformed},
      {"bad recipient",
       [&] {
         auto tx = BaseTx();
         tx.mutable_transfer()->set_to("short");
         return SignTx(tx, key);
       },
       malformed, kMalformed},
      {"empty put key",
       [&] {
         auto tx = BaseTx();
         tx.mutable_put()->set_value("v");
         return SignTx(tx, key);
       },
       malformed, kMalformed},
      {"memo too long",
       [&] {
         auto tx = BaseTx();
         tx.set_memo(std::string(300, 'm'));
         return SignTx(tx, key);
       },
       malformed, kMalformed},
      {"wrong partition",
       [&] {
         auto tx = BaseTx();
         tx.set_partition(kPartition + 1);
         return SignTx(tx, key);
       },
       absl::StatusCode::kFailedPrecondition, "wrong partition"},
      {"zero nonce",
       [&] {
         auto tx = BaseTx();
         tx.set_nonce(0);
         return SignTx(tx, key);
       },
       absl::StatusCode::kInvalidArgument, "zero nonce"},
      {"flipped signature bit",
       [&] {
         auto with_sender = BaseTx();
         with_sender.set_sender(key.public_key().bytes());
         const std::string tx = with_sender.SerializeAsString();
         std::string sig = key.Sign(tx);
         sig[10] ^= 0x01;
         return Raw(tx, sig);
       },
       absl::StatusCode::kUnauthenticated, "bad signature", true},
      {"signed by another key",
       [&] {
         auto tx = BaseTx();
         tx.set_sender(key.public_key().bytes());
         return SignRaw(tx, other);
       },
       absl::StatusCode::kUnauthenticated, "bad signature", true},
      {"tampered payload",
       [&] {
         auto tx = BaseTx();
         tx.set_sender(key.public_key().bytes());
         const std::string sig = key.Sign(tx.SerializeAsString());
         tx.mutable_transfer()->set_amount(5000);
         return Raw(tx.SerializeAsString(), sig);
       },
       absl::StatusCode::kUnauthenticated, "bad signature", true},
  };
  TxLimits limits{.partition = kPartition};
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<DecodedTx> d = DecodeSignedTx(c.bytes(), limits);
    absl::Status s = d.status();
    if (c.at_verify) {
      ASSERT_TRUE(d.ok()) << d.status();
      s = VerifySignature(*d);
    }
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_TRUE(absl::StartsWith(s.message(), c.prefix)) << s;
  }
}

}  // namespace
}  // namespace base
