// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78): the checksum of TensorBoard
// event records and of dlkit's checkpoint files. SSE4.2 has an instruction for exactly this CRC,
// so checksumming a multi-GB checkpoint costs little next to writing it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dl {

// CRC-32C of n bytes, continuing from `crc` (the CRC of the bytes before), so a stream can be
// checksummed in pieces: crc32c(b, nb, crc32c(a, na)) == crc32c of a followed by b.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// The masked CRC that TensorFlow's record format stores (a CRC of data that itself contains CRCs
// is weak, so the stored value is rotated and offset): ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc32c(uint32_t crc);
// masked CRC-32C of n bytes: mask_crc32c(crc32c(data, n)).
uint32_t masked_crc32c(const void* data, size_t n);

namespace detail {
// The two implementations behind crc32c(), exposed so tests can check they agree.
uint32_t crc32c_table(const void* data, size_t n, uint32_t crc);
uint32_t crc32c_hw(const void* data, size_t n, uint32_t crc);  // only call if crc32c_hw_available()
bool crc32c_hw_available();
}  // namespace detail

}  // namespace dl
