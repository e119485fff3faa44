#include "dl/core/dtype.hpp"

#include <array>

namespace dl {

namespace {
struct DTypeInfo {
  DType type;
  size_t size;
  std::string_view name;
  std::string_view st_name;
};
constexpr std::array<DTypeInfo, 8> kInfo{{
    {DType::f32, 4, "f32", "F32"},
    {DType::f64, 8, "f64", "F64"},
    {DType::bf16, 2, "bf16", "BF16"},
    {DType::f16, 2, "f16", "F16"},
    {DType::i32, 4, "i32", "I32"},
    {DType::i64, 8, "i64", "I64"},
    {DType::u8, 1, "u8", "U8"},
    {DType::u16, 2, "u16", "U16"},
}};
const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }
std::string_view safetensors_dtype(DType t) { return info(t).st_name; }

bool parse_safetensors_dtype(std::string_view s, DType& out) {
  for (const auto& i : kInfo) {
    if (i.st_name == s) {
      out = i.type;
      return true;
    }
  }
  return false;
}

std::string Device::name() const {
  return type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace dl
