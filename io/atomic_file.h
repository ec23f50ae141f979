#pragma once
// Writing a file so that a reader, or a crash at any moment, finds the old
// contents or the new ones, never a mix. The bytes go to a temporary file in
// the same directory, "<path>.tmp.<pid>.<n>" (a name no other writer uses),
// which is fsync'ed and renamed over `path`; then the directory is fsync'ed,
// so that the rename itself survives a power loss. On any failure the
// temporary file is removed and `path` keeps its old contents.
//
// A writer killed mid-way cannot remove its temporary file. Every write to a
// path first removes the temporary files of that path whose writer process no
// longer runs (a pid reused since then keeps its file until that process ends).
#include <span>
#include <string>
#include <string_view>

namespace vjit::io {

// Writes the concatenation of `pieces` to `path` as above. Throws UserError
// naming `what` ("checkpoint"), the file and the system's error text.
void write_file_atomically(const std::string& path, std::span<const std::string_view> pieces, const std::string& what);

// The temporary files of `path` left by writers that no longer run, removed;
// returns how many.
int remove_stale_temporaries(const std::string& path);

}  // namespace vjit::io
