// Byzantine behaviour for tests/sim: garbage messages of every kind, correctly signed by the
// Byzantine replica itself (it cannot sign as anyone else), but wrong in content.
#ifndef TESTS_SIM_SIM_BYZANTINE_H_
#define TESTS_SIM_SIM_BYZANTINE_H_

#include <random>
#include <string>

#include "partitions/pbft_types.h"

namespace sim {

std::string RandomBytes(std::mt19937_64& rng, size_t n);

// One garbage message from replica `self` (in `base_view`, having executed `last_executed`), signed
// by `crypto`: random votes and checkpoints, a pre-prepare of an unsubmitted tx, a view change with
// a forged certificate, an empty new view, a sync response with a forged certificate, a random sync
// request, or an empty body.
partitions::ConsensusMessage MakeGarbage(std::mt19937_64& rng, const partitions::PbftConfig& config,
                                         uint64_t base_view, uint64_t last_executed, uint32_t self,
                                         partitions::PbftCrypto& crypto);

}  // namespace sim

#endif  // TESTS_SIM_SIM_BYZANTINE_H_
