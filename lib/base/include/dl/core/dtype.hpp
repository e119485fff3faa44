// Element types and devices.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dl {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, u8, u16 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);         // "f32", "bf16", ...
std::string_view safetensors_dtype(DType t);  // "F32", "BF16", ...
// Parses a safetensors dtype string ("F32"); returns false when dlkit does not handle it.
bool parse_safetensors_dtype(std::string_view s, DType& out);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::cpu; }
  std::string name() const;  // "cpu", "cuda:0"
  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
};

}  // namespace dl
