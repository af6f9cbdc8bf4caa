// Builds small x86-64 shared objects for tests: a real, dlopen-able library
// whose functions return at once, laid out as graphc's are (a read-only
// segment with the tables, an executable one with the code, a writable one with
// the dynamic section and the GOT), with a knob for each way a hostile or
// corrupt library differs (constructors, foreign imports and libraries,
// executable stack, writable code, IFUNC, IRELATIVE, truncation).

#ifndef GRAPHC_RUNTIME_CORE_TESTING_ELF_BUILDER_H_
#define GRAPHC_RUNTIME_CORE_TESTING_ELF_BUILDER_H_

#include <elf.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace graphc::runtime::testing {

struct ElfSpec {
  // Launch entries E: a function graphc_kernel_E and, when the second string
  // is not empty, graphc_signature_E holding it.
  std::vector<std::pair<std::string, std::string>> entries;
  std::vector<std::string> imports;  // undefined symbols, bound by PLT relocations
  std::vector<std::string> needed;   // DT_NEEDED libraries
  std::vector<std::pair<int64_t, uint64_t>> extra_tags;  // more dynamic entries
  uint32_t import_relocation = R_X86_64_JUMP_SLOT;
  bool executable_stack = false;
  bool gnu_stack = true;
  bool writable_code = false;
  bool ifunc_entries = false;  // entries typed STT_GNU_IFUNC
  bool tls_segment = false;
  // More program headers of these types, over the first page (PT_NOTE, ...).
  std::vector<uint32_t> extra_segments;
  bool pltgot_in_code = false;  // DT_PLTGOT pointing at the executable segment
  std::vector<std::string> other_functions;  // more defined functions (e.g. `system`)
  bool relocate_own_symbol = false;  // the import relocations name a defined symbol
};

inline uint32_t GnuHash(const std::string& name) {
  uint32_t h = 5381;
  for (unsigned char c : name) h = h * 33 + c;
  return h;
}

inline std::vector<uint8_t> BuildElf(const ElfSpec& spec) {
  constexpr uint64_t kPage = 0x1000;
  std::vector<uint8_t> out(3 * kPage, 0);
  auto put = [&](uint64_t offset, const void* data, size_t size) {
    if (offset + size > out.size()) out.resize(offset + size, 0);
    std::memcpy(out.data() + offset, data, size);
  };
  auto align = [](uint64_t v, uint64_t a) { return (v + a - 1) / a * a; };

  // Strings and symbols: undefined imports first, then the defined ones (the
  // GNU hash table covers the defined symbols).
  std::string strtab(1, '\0');
  auto add_string = [&](const std::string& s) {
    uint32_t at = static_cast<uint32_t>(strtab.size());
    strtab += s;
    strtab += '\0';
    return at;
  };
  std::vector<uint32_t> needed_names;
  for (const std::string& lib : spec.needed) needed_names.push_back(add_string(lib));
  struct Symbol {
    std::string name;
    Elf64_Sym sym{};
  };
  std::vector<Symbol> symbols(1);
  for (const std::string& name : spec.imports) {
    Symbol s{name, {}};
    s.sym.st_name = add_string(name);
    s.sym.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
    symbols.push_back(s);
  }
  const uint32_t first_defined = static_cast<uint32_t>(symbols.size());
  for (const std::string& name : spec.other_functions) {
    Symbol f{name, {}};
    f.sym.st_name = add_string(name);
    f.sym.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
    f.sym.st_shndx = 1;
    f.sym.st_value = kPage;
    f.sym.st_size = 1;
    symbols.push_back(f);
  }
  // Read-only data: the signature strings, placed after the tables below.
  std::string rodata;
  std::vector<std::pair<size_t, size_t>> signature_at;  // (symbol, offset in rodata)
  for (size_t i = 0; i < spec.entries.size(); ++i) {
    const auto& [entry, signature] = spec.entries[i];
    Symbol f{"graphc_kernel_" + entry, {}};
    f.sym.st_name = add_string(f.name);
    f.sym.st_info = ELF64_ST_INFO(STB_GLOBAL, spec.ifunc_entries ? STT_GNU_IFUNC : STT_FUNC);
    f.sym.st_shndx = 1;
    f.sym.st_value = kPage + i;  // one `ret` each
    f.sym.st_size = 1;
    symbols.push_back(f);
    if (signature.empty()) continue;
    Symbol d{"graphc_signature_" + entry, {}};
    d.sym.st_name = add_string(d.name);
    d.sym.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
    d.sym.st_shndx = 1;
    d.sym.st_size = signature.size() + 1;
    signature_at.emplace_back(symbols.size(), rodata.size());
    symbols.push_back(d);
    rodata += signature;
    rodata += '\0';
  }

  const uint16_t phnum = 6 + (spec.tls_segment ? 1 : 0) - (spec.gnu_stack ? 0 : 1) +
                         static_cast<uint16_t>(spec.extra_segments.size());
  const uint64_t dynsym_at = align(sizeof(Elf64_Ehdr) + phnum * sizeof(Elf64_Phdr), 8);
  const uint64_t dynstr_at = dynsym_at + symbols.size() * sizeof(Elf64_Sym);
  const uint64_t hash_at = align(dynstr_at + strtab.size(), 8);
  const uint32_t defined = static_cast<uint32_t>(symbols.size()) - first_defined;
  const uint64_t hash_size = 16 + 8 + 4 + 4 * defined;
  const uint64_t rela_at = align(hash_at + hash_size, 8);
  const uint64_t rela_size = spec.imports.size() * sizeof(Elf64_Rela);
  const uint64_t rodata_at = rela_at + rela_size;
  const uint64_t ro_end = rodata_at + rodata.size();
  if (ro_end > kPage) return {};  // a test fixture, not a linker
  for (const auto& [symbol, offset] : signature_at)
    symbols[symbol].sym.st_value = rodata_at + offset;

  // Writable segment: the dynamic section, then the GOT.
  std::vector<Elf64_Dyn> dynamic;
  auto tag = [&](int64_t t, uint64_t v) {
    Elf64_Dyn d;
    d.d_tag = t;
    d.d_un.d_val = v;
    dynamic.push_back(d);
  };
  for (uint32_t name : needed_names) tag(DT_NEEDED, name);
  tag(DT_STRTAB, dynstr_at);
  tag(DT_STRSZ, strtab.size());
  tag(DT_SYMTAB, dynsym_at);
  tag(DT_SYMENT, sizeof(Elf64_Sym));
  tag(DT_GNU_HASH, hash_at);
  tag(DT_FLAGS, DF_BIND_NOW);
  const uint64_t got_entries = 3 + spec.imports.size();
  const uint64_t dynamic_count = dynamic.size() + 4 * !spec.imports.empty() +
                                 spec.extra_tags.size() + 1;
  const uint64_t dynamic_at = 2 * kPage;
  const uint64_t got_at = dynamic_at + dynamic_count * sizeof(Elf64_Dyn);
  if (!spec.imports.empty()) {
    tag(DT_PLTGOT, spec.pltgot_in_code ? kPage : got_at);
    tag(DT_JMPREL, rela_at);
    tag(DT_PLTRELSZ, rela_size);
    tag(DT_PLTREL, DT_RELA);
  }
  for (const auto& [t, v] : spec.extra_tags) tag(t, v);
  tag(DT_NULL, 0);
  const uint64_t rw_size = (got_at - dynamic_at) + 8 * got_entries;

  // Tables.
  for (size_t i = 0; i < symbols.size(); ++i)
    put(dynsym_at + i * sizeof(Elf64_Sym), &symbols[i].sym, sizeof(Elf64_Sym));
  put(dynstr_at, strtab.data(), strtab.size());
  const uint32_t hash_header[4] = {1, first_defined, 1, 0};
  put(hash_at, hash_header, 16);
  const uint64_t bloom = ~uint64_t{0};
  put(hash_at + 16, &bloom, 8);
  const uint32_t bucket = defined ? first_defined : 0;
  put(hash_at + 24, &bucket, 4);
  for (uint32_t i = 0; i < defined; ++i) {
    uint32_t chain = GnuHash(symbols[first_defined + i].name) & ~1u;
    if (i + 1 == defined) chain |= 1;
    put(hash_at + 28 + 4 * i, &chain, 4);
  }
  for (size_t i = 0; i < spec.imports.size(); ++i) {
    Elf64_Rela rela;
    rela.r_offset = got_at + 8 * (3 + i);
    rela.r_info = ELF64_R_INFO(spec.relocate_own_symbol ? first_defined : 1 + i,
                               spec.import_relocation);
    rela.r_addend = 0;
    put(rela_at + i * sizeof(Elf64_Rela), &rela, sizeof(rela));
  }
  put(rodata_at, rodata.data(), rodata.size());
  std::vector<uint8_t> code(std::max<size_t>(spec.entries.size(), 1), 0xc3);  // ret
  put(kPage, code.data(), code.size());
  put(dynamic_at, dynamic.data(), dynamic.size() * sizeof(Elf64_Dyn));
  out.resize(dynamic_at + rw_size, 0);  // the file ends where the last segment does

  // Headers.
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_phoff = sizeof(Elf64_Ehdr);
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = phnum;
  put(0, &eh, sizeof(eh));
  std::vector<Elf64_Phdr> ph;
  auto segment = [&](uint32_t type, uint32_t flags, uint64_t offset, uint64_t size,
                     uint64_t align_to) {
    Elf64_Phdr p{};
    p.p_type = type;
    p.p_flags = flags;
    p.p_offset = p.p_vaddr = p.p_paddr = offset;
    p.p_filesz = p.p_memsz = size;
    p.p_align = align_to;
    ph.push_back(p);
  };
  segment(PT_LOAD, PF_R, 0, ro_end, kPage);
  segment(PT_LOAD, PF_R | PF_X | (spec.writable_code ? PF_W : 0), kPage, code.size(), kPage);
  segment(PT_LOAD, PF_R | PF_W, dynamic_at, rw_size, kPage);
  segment(PT_DYNAMIC, PF_R | PF_W, dynamic_at, dynamic.size() * sizeof(Elf64_Dyn), 8);
  // As lld writes it: over the whole writable segment, starting where it does.
  segment(PT_GNU_RELRO, PF_R, dynamic_at, rw_size, 1);
  if (spec.gnu_stack)
    segment(PT_GNU_STACK, PF_R | PF_W | (spec.executable_stack ? PF_X : 0), 0, 0, 16);
  if (spec.tls_segment) segment(PT_TLS, PF_R, 0, 0, 8);
  for (uint32_t type : spec.extra_segments) segment(type, PF_R, 0, 64, 8);
  put(sizeof(Elf64_Ehdr), ph.data(), ph.size() * sizeof(Elf64_Phdr));
  return out;
}

}  // namespace graphc::runtime::testing

#endif  // GRAPHC_RUNTIME_CORE_TESTING_ELF_BUILDER_H_
