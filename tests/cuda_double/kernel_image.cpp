#include "kernel_image.h"

#include <elf.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <regex>

namespace vjit_double {
namespace {

bool is_elf(const char* bytes) { return std::memcmp(bytes, ELFMAG, SELFMAG) == 0 && bytes[EI_CLASS] == ELFCLASS64; }

// An ELF file's length: the furthest of its section headers and section contents.
size_t elf_size(const char* bytes) {
  Elf64_Ehdr header;
  std::memcpy(&header, bytes, sizeof header);
  size_t end = header.e_shoff + size_t(header.e_shnum) * header.e_shentsize;
  end = std::max<size_t>(end, header.e_phoff + size_t(header.e_phnum) * header.e_phentsize);
  for (int i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr section;
    std::memcpy(&section, bytes + header.e_shoff + size_t(i) * header.e_shentsize, sizeof section);
    if (section.sh_type != SHT_NOBITS) end = std::max<size_t>(end, section.sh_offset + section.sh_size);
  }
  return end;
}

struct ElfSections {
  std::map<std::string, std::string> contents;  // by name
  std::vector<std::string> function_symbols;
};

ElfSections read_sections(const std::string& image) {
  ElfSections out;
  Elf64_Ehdr header;
  std::memcpy(&header, image.data(), sizeof header);
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  for (size_t i = 0; i < sections.size(); ++i)
    std::memcpy(&sections[i], image.data() + header.e_shoff + i * header.e_shentsize, sizeof(Elf64_Shdr));
  if (header.e_shstrndx >= sections.size()) return out;
  const char* names = image.data() + sections[header.e_shstrndx].sh_offset;
  for (const Elf64_Shdr& s : sections)
    if (s.sh_type != SHT_NOBITS) out.contents[names + s.sh_name] = image.substr(s.sh_offset, s.sh_size);
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_type != SHT_SYMTAB || s.sh_link >= sections.size()) continue;
    const char* strings = image.data() + sections[s.sh_link].sh_offset;
    for (size_t at = 0; at + sizeof(Elf64_Sym) <= s.sh_size; at += sizeof(Elf64_Sym)) {
      Elf64_Sym symbol;
      std::memcpy(&symbol, image.data() + s.sh_offset + at, sizeof symbol);
      if (ELF64_ST_TYPE(symbol.st_info) == STT_FUNC) out.function_symbols.emplace_back(strings + symbol.st_name);
    }
  }
  return out;
}

// A kernel's .nv.info.<name> section: records of {format, attribute, value};
// format 4 (a sized value) has a 16-bit size and that many bytes, the others
// are 4 bytes in all. EIATTR_KPARAM_INFO (0x17) describes one parameter:
// {u32 index, u16 ordinal, u16 offset, u32 flags}, its size in bits 18..31 of flags.
constexpr uint8_t kSizedValue = 0x04, kParamInfo = 0x17;

std::vector<int> cubin_param_bytes(const std::string& info) {
  std::map<int, int> by_ordinal;
  for (size_t at = 0; at + 4 <= info.size();) {
    const uint8_t format = uint8_t(info[at]), attribute = uint8_t(info[at + 1]);
    if (format != kSizedValue) {
      at += 4;
      continue;
    }
    uint16_t size = 0;
    std::memcpy(&size, info.data() + at + 2, sizeof size);
    if (attribute == kParamInfo && size >= 12 && at + 4 + 12 <= info.size()) {
      uint16_t ordinal = 0;
      uint32_t flags = 0;
      std::memcpy(&ordinal, info.data() + at + 8, sizeof ordinal);
      std::memcpy(&flags, info.data() + at + 12, sizeof flags);
      by_ordinal[ordinal] = int((flags >> 18) & 0x3fff);
    }
    at += 4 + size;
  }
  std::vector<int> bytes;
  for (const auto& [ordinal, size] : by_ordinal) {
    if (ordinal != int(bytes.size())) return {};  // a gap: not a layout this reader knows
    bytes.push_back(size);
  }
  return bytes;
}

std::optional<KernelSignature> find_in_cubin(const std::string& image, const std::string& name) {
  const ElfSections elf = read_sections(image);
  if (std::find(elf.function_symbols.begin(), elf.function_symbols.end(), name) == elf.function_symbols.end())
    return std::nullopt;
  KernelSignature signature;
  auto info = elf.contents.find(".nv.info." + name);
  if (info != elf.contents.end()) signature.param_bytes = cubin_param_bytes(info->second);
  signature.params_known = info != elf.contents.end() && !signature.param_bytes.empty();
  return signature;
}

// `.entry name(` ... `)`: one `.param .<type><bits> name` per parameter.
std::optional<KernelSignature> find_in_ptx(const std::string& image, const std::string& name) {
  const std::string entry = ".entry " + name + "(";
  const size_t start = image.find(entry);
  if (start == std::string::npos) return std::nullopt;
  const size_t end = image.find(')', start);
  const std::string list = image.substr(start + entry.size(), end - start - entry.size());
  static const std::regex param(R"(\.param\s+\.[a-z](8|16|32|64)\b)");
  KernelSignature signature;
  for (std::sregex_iterator it(list.begin(), list.end(), param), done; it != done; ++it)
    signature.param_bytes.push_back(std::stoi((*it)[1]) / 8);
  signature.params_known = true;
  return signature;
}

}  // namespace

std::optional<std::string> copy_module_image(const void* image) {
  const char* bytes = static_cast<const char*>(image);
  if (bytes == nullptr) return std::nullopt;
  if (is_elf(bytes)) return std::string(bytes, elf_size(bytes));
  // PTX text, as NVRTC writes it, opens with a comment or a directive.
  if (bytes[0] == '/' || bytes[0] == '.') return std::string(bytes);
  return std::nullopt;
}

std::optional<KernelSignature> find_kernel(const std::string& image, const std::string& name) {
  return is_elf(image.data()) ? find_in_cubin(image, name) : find_in_ptx(image, name);
}

}  // namespace vjit_double
