#pragma once
// Files that are either wholly the old version or wholly the new one, whatever
// happens during the write (a crash, SIGKILL, a full disk, a power cut): the
// bytes go to a temporary file beside the target, are flushed to the disk
// (fsync), and the temporary replaces the target by rename(2), after which the
// directory is flushed too, so the rename itself is durable. On any failure the
// temporary file is removed and the target is untouched.
//
// The temporary is named "<target>.tmp.<pid>". A writer killed between creating
// it and the rename leaves that file behind (nothing can remove it then); the
// next write_file_atomically to the same target removes such leftovers of
// processes that no longer exist.
#include <string>
#include <string_view>

namespace vjit::io {

// Writes `bytes` to `path` atomically and durably. Throws UserError naming the
// path, the step that failed and the system's reason.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace vjit::io
