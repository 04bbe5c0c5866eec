#pragma once
// Readable values of test parameters. GoogleTest prints a parameter in the test's name as ctest
// lists it ("... # GetParam() = ..."); an enum or a struct without a printer comes out as a byte
// dump ("4-byte object <01-00 00-00>"). The printers are found by argument-dependent lookup, so
// they live in the enums' namespaces.
#include <ostream>

#include "backend/backend.hpp"
#include "kernels/cpu/kernels.hpp"

namespace latprof {

inline void PrintTo(WeightType t, std::ostream* os) {
  *os << (t == WeightType::f16 ? "f16" : t == WeightType::i8 ? "i8" : "unknown");
}

namespace cpu {
inline void PrintTo(Isa isa, std::ostream* os) {
  *os << isa_name(isa);
}
}  // namespace cpu

}  // namespace latprof
