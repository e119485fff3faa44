// A lock as a stranger's repository could ship it (issue 31): its interpreter is a script and its
// [lib] entries a shared library, each of which writes `marker` when it runs or is loaded. Reading
// the lock (check, --strict, diff, dl-train --env-lock) must leave `marker` absent.
#pragma once
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "dl/env/lock.hpp"
#include "dl/env/process.hpp"
#include "support/support.hpp"

namespace dl::test {

struct HostileLock {
  fs::path lock;         // sealed (content-hash matches), kind "resolved": only its own entries count
  fs::path marker;       // appears when the script runs or the library is loaded
  fs::path interpreter;  // python."<interpreter>": prints Python 3.11.7 and numpy 1.24.2, like pip
  fs::path library;      // lib."<library>" (a path) and lib."libdlkitevil.so.1" (found through lib_dir)
  fs::path lib_dir;      // where libdlkitevil.so.1 lies: LD_LIBRARY_PATH for the tools
  bool library_built = false;  // false: no C compiler here, so the lock names no library
  std::string lib_env() const { return "LD_LIBRARY_PATH=" + lib_dir.string(); }
};

// The shared library: its constructor appends to the marker. Built with this machine's C compiler.
inline bool build_marker_library(const fs::path& source_dir, const fs::path& library, const fs::path& marker) {
  std::string cc = find_program("cc");
  if (cc.empty()) cc = find_program("gcc");
  if (cc.empty()) return false;
  write_file(source_dir / "evil.c", "#include <stdio.h>\n"
                                    "__attribute__((constructor)) static void ran(void) {\n"
                                    "  FILE* f = fopen(\"" + marker.string() + "\", \"a\");\n"
                                    "  if (f) { fputs(\"library loaded\\n\", f); fclose(f); }\n"
                                    "}\n");
  ProcessOptions po;
  po.timeout_s = 60;
  ProcessResult r = run_process({cc, "-shared", "-fPIC", "-o", library.string(), (source_dir / "evil.c").string()}, po);
  return r.ok() && fs::exists(library);
}

inline HostileLock write_hostile_lock(const fs::path& dir) {
  HostileLock h;
  h.marker = dir / "marker";
  h.interpreter = dir / "python";
  h.lib_dir = dir / "lib";
  h.library = h.lib_dir / "libdlkitevil.so.1.0";
  h.lock = dir / "shared.lock";
  write_file(h.interpreter, "#!/bin/sh\n"
                            "echo \"ran: $0 $*\" >> " + h.marker.string() + "\n"
                            "if [ \"$1\" = --version ]; then echo 'Python 3.11.7'; exit 0; fi\n"
                            "echo '[{\"name\": \"numpy\", \"version\": \"1.24.2\"}]'\n");
  ::chmod(h.interpreter.c_str(), 0755);
  fs::create_directories(h.lib_dir);
  h.library_built = build_marker_library(dir, h.library, h.marker);
  if (h.library_built) fs::create_symlink(h.library.filename(), h.lib_dir / "libdlkitevil.so.1");

  Lock l;
  l.kind = "resolved";
  l.header.created_by = "a stranger's repository";
  l.add({"python", h.interpreter.string()}, "3.11.7").set("executable", h.interpreter.string());
  l.add({"python", h.interpreter.string(), "packages", "numpy"}, "1.24.2");
  if (h.library_built) {
    l.add({"lib", h.library.string()}, "1.0").set("library", h.library.string());
    l.add({"lib", "libdlkitevil.so.1"}, "1.0").set("library", h.library.string());
  }
  seal(l);
  write_lock(h.lock, l);
  return h;
}

}  // namespace dl::test
