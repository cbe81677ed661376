#include "partitions/block.h"

#include "base/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace partitions {

std::string BlockHash(const node::chain::BlockHeader& header) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    header.SerializeToCodedStream(&coded);
  }
  return base::Sha256Bytes(bytes);
}

std::string TxRoot(const google::protobuf::RepeatedPtrField<std::string>& tx_hashes) {
  std::string all;
  all.reserve(tx_hashes.size() * 32);
  for (const std::string& h : tx_hashes) all += h;
  return base::Sha256Bytes(all);
}

}  // namespace partitions
