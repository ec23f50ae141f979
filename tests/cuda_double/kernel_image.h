#pragma once
// What the driver double reads in a module image (a cubin, or PTX text):
// whether a kernel of that name is in it, and the sizes of its parameters, so
// a launch's argument block can be read and counted as a GPU would read it.
#include <optional>
#include <string>
#include <vector>

namespace vjit_double {

// The image starting at `image`, copied: a cubin (ELF) as long as its header
// says, PTX up to its terminating NUL. nullopt for anything else.
std::optional<std::string> copy_module_image(const void* image);

struct KernelSignature {
  std::vector<int> param_bytes;  // per parameter, in order; empty when the image does not say
  bool params_known = false;
};
// The kernel `name` of the image; nullopt when the image has no such kernel.
std::optional<KernelSignature> find_kernel(const std::string& image, const std::string& name);

}  // namespace vjit_double
