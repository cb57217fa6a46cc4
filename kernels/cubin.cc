#include "kernels/cubin.h"

#include <elf.h>

#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace autotune::kernels {
namespace {

// Attribute formats and the one attribute read here (NVIDIA's EIATTR_*).
constexpr uint8_t kFormatSizedValue = 0x04;  // u16 size, then the value
constexpr uint8_t kParamInfo = 0x17;         // EIATTR_KPARAM_INFO
constexpr size_t kParamInfoBytes = 12;       // u32 index, u16 ordinal, u16 offset, u32 flags

template <typename T>
T Read(absl::string_view bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

bool Fits(absl::string_view bytes, uint64_t offset, uint64_t size) {
  return offset <= bytes.size() && size <= bytes.size() - offset;
}

absl::StatusOr<std::map<std::string, absl::string_view>> Sections(absl::string_view elf) {
  if (elf.size() < sizeof(Elf64_Ehdr) || std::memcmp(elf.data(), ELFMAG, SELFMAG) != 0) {
    return absl::InvalidArgumentError("not an ELF image");
  }
  const auto header = Read<Elf64_Ehdr>(elf, 0);
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB) {
    return absl::InvalidArgumentError("not a 64-bit little-endian ELF image");
  }
  if (header.e_shentsize != sizeof(Elf64_Shdr) ||
      !Fits(elf, header.e_shoff, uint64_t{header.e_shnum} * sizeof(Elf64_Shdr)) ||
      header.e_shstrndx >= header.e_shnum) {
    return absl::InvalidArgumentError("the ELF section table lies outside the image");
  }
  auto section_header = [&](size_t i) {
    return Read<Elf64_Shdr>(elf, header.e_shoff + i * sizeof(Elf64_Shdr));
  };
  const Elf64_Shdr names = section_header(header.e_shstrndx);
  if (!Fits(elf, names.sh_offset, names.sh_size)) {
    return absl::InvalidArgumentError("the ELF section names lie outside the image");
  }
  const absl::string_view name_table = elf.substr(names.sh_offset, names.sh_size);
  std::map<std::string, absl::string_view> sections;
  for (size_t i = 0; i < header.e_shnum; ++i) {
    const Elf64_Shdr section = section_header(i);
    if (section.sh_name >= name_table.size()) {
      return absl::InvalidArgumentError(absl::StrCat("ELF section ", i, " has no name"));
    }
    absl::string_view name = name_table.substr(section.sh_name);
    name = name.substr(0, name.find('\0'));
    absl::string_view contents;
    if (section.sh_type != SHT_NOBITS) {
      if (!Fits(elf, section.sh_offset, section.sh_size)) {
        return absl::InvalidArgumentError(
            absl::StrCat("ELF section '", name, "' lies outside the image"));
      }
      contents = elf.substr(section.sh_offset, section.sh_size);
    }
    sections.emplace(std::string(name), contents);
  }
  return sections;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> KernelParameterSizes(absl::string_view cubin,
                                                          absl::string_view lowered_name) {
  absl::StatusOr<std::map<std::string, absl::string_view>> sections = Sections(cubin);
  if (!sections.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the cubin: ", sections.status().message()));
  }
  const std::string text = absl::StrCat(".text.", lowered_name);
  const auto info = sections->find(absl::StrCat(".nv.info.", lowered_name));
  if (!sections->contains(text) && info == sections->end()) {
    return absl::NotFoundError(absl::StrCat("the cubin has no kernel '", lowered_name, "'"));
  }
  std::map<int, int64_t> size_by_ordinal;
  if (info != sections->end()) {
    const absl::string_view attributes = info->second;
    size_t at = 0;
    while (at + 4 <= attributes.size()) {
      const auto format = static_cast<uint8_t>(attributes[at]);
      const auto attribute = static_cast<uint8_t>(attributes[at + 1]);
      size_t value_at = at + 2;
      size_t value_bytes = 2;
      if (format == kFormatSizedValue) {
        value_at = at + 4;
        value_bytes = Read<uint16_t>(attributes, at + 2);
      }
      if (!Fits(attributes, value_at, value_bytes)) {
        return absl::InvalidArgumentError(absl::StrCat("the cubin's attributes of '", lowered_name,
                                                       "' are cut short at byte ", at));
      }
      if (attribute == kParamInfo && format == kFormatSizedValue) {
        if (value_bytes < kParamInfoBytes) {
          return absl::InvalidArgumentError(absl::StrCat("a parameter of '", lowered_name,
                                                         "' is described in ", value_bytes,
                                                         " bytes, fewer than ", kParamInfoBytes));
        }
        const int ordinal = Read<uint16_t>(attributes, value_at + 4);
        const int64_t size = Read<uint32_t>(attributes, value_at + 8) >> 18;
        if (!size_by_ordinal.emplace(ordinal, size).second) {
          return absl::InvalidArgumentError(absl::StrCat("the cubin lists parameter ", ordinal,
                                                         " of '", lowered_name, "' twice"));
        }
      }
      at = value_at + value_bytes;
    }
  }
  std::vector<int64_t> sizes;
  for (const auto& [ordinal, size] : size_by_ordinal) {
    if (ordinal != static_cast<int>(sizes.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("the cubin lists no parameter ", sizes.size(), " of '", lowered_name, "'"));
    }
    sizes.push_back(size);
  }
  return sizes;
}

}  // namespace autotune::kernels
