// TensorBoard scalar logging without TensorFlow: the event file is a TFRecord stream of
// hand-encoded tensorflow.Event protobufs (REFERENCE.md "File formats").
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace dl {

class TensorBoardWriter {
 public:
  // Creates dir (if needed) and "events.out.tfevents.<10-digit unix time>.<hostname>" in it
  // (".<n>" is appended if that name is already taken), and writes the file_version record.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event{wall_time, step, summary{value{tag, simple_value}}}. Buffered: call flush() after a
  // batch of scalars so TensorBoard (which tails the file) sees them.
  void add_scalar(std::string_view tag, float value, int64_t step, double wall_time = now());
  void flush();

  const std::filesystem::path& path() const { return path_; }
  static double now();  // seconds since the Unix epoch, with sub-second precision

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  int fd_ = -1;
  std::string pending_;  // records not yet written (flush() writes them)
};

namespace detail {
// Protobuf wire encoding, exposed for tests.
void pb_varint(std::string& out, uint64_t v);
void pb_tag(std::string& out, int field, int wire_type);
std::string tb_file_version_event(double wall_time);
std::string tb_scalar_event(std::string_view tag, float value, int64_t step, double wall_time);
std::string tb_record(const std::string& data);  // length | masked crc | data | masked crc
}  // namespace detail

}  // namespace dl
