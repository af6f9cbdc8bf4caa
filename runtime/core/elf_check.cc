// The kernel library check (see elf_check.h). Everything is read with memcpy
// from bounds-checked offsets: the bytes come from the plan file.

#include "runtime/core/elf_check.h"

#include <elf.h>

#include "runtime/core/plan_loader.h"  // Printable

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace graphc::runtime {
namespace {

Status Unsafe(const std::string& message) {
  return Status(ErrorCode::kPlanUnsafeCode, "kernel library: " + message);
}

std::string Hex(uint64_t value) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), digits[value & 15]);
    value >>= 4;
  } while (value != 0);
  return "0x" + s;
}

// Dynamic-section tags graphc's libraries use or that run no code; any other
// tag is refused (DT_INIT, DT_INIT_ARRAY, DT_PREINIT_ARRAY, DT_FINI,
// DT_FINI_ARRAY, DT_AUDIT, DT_DEPAUDIT, DT_AUXILIARY, DT_FILTER, DT_RPATH,
// DT_RUNPATH, DT_TEXTREL, DT_REL, DT_RELR and versioning among them).
std::optional<const char*> AllowedTag(int64_t tag) {
  switch (tag) {
    case DT_NULL: return "DT_NULL";
    case DT_NEEDED: return "DT_NEEDED";
    case DT_PLTRELSZ: return "DT_PLTRELSZ";
    case DT_PLTGOT: return "DT_PLTGOT";
    case DT_HASH: return "DT_HASH";
    case DT_STRTAB: return "DT_STRTAB";
    case DT_SYMTAB: return "DT_SYMTAB";
    case DT_RELA: return "DT_RELA";
    case DT_RELASZ: return "DT_RELASZ";
    case DT_RELAENT: return "DT_RELAENT";
    case DT_STRSZ: return "DT_STRSZ";
    case DT_SYMENT: return "DT_SYMENT";
    case DT_SONAME: return "DT_SONAME";
    case DT_PLTREL: return "DT_PLTREL";
    case DT_JMPREL: return "DT_JMPREL";
    case DT_BIND_NOW: return "DT_BIND_NOW";
    case DT_FLAGS: return "DT_FLAGS";
    case DT_FLAGS_1: return "DT_FLAGS_1";
    case DT_GNU_HASH: return "DT_GNU_HASH";
    case DT_RELACOUNT: return "DT_RELACOUNT";
    default: return std::nullopt;
  }
}

std::string TagName(int64_t tag) {
  switch (tag) {
    case DT_INIT: return "DT_INIT (a constructor)";
    case DT_FINI: return "DT_FINI (a destructor)";
    case DT_INIT_ARRAY: return "DT_INIT_ARRAY (constructors)";
    case DT_FINI_ARRAY: return "DT_FINI_ARRAY (destructors)";
    case DT_PREINIT_ARRAY: return "DT_PREINIT_ARRAY (constructors)";
    case DT_AUDIT: return "DT_AUDIT (an audit library)";
    case DT_DEPAUDIT: return "DT_DEPAUDIT (an audit library)";
    case DT_AUXILIARY: return "DT_AUXILIARY (a filter library)";
    case DT_FILTER: return "DT_FILTER (a filter library)";
    case DT_RPATH: return "DT_RPATH (a library search path)";
    case DT_RUNPATH: return "DT_RUNPATH (a library search path)";
    case DT_TEXTREL: return "DT_TEXTREL (relocations in code)";
    default: return "dynamic tag " + Hex(static_cast<uint64_t>(tag));
  }
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // Whether [offset, offset + bytes) lies inside the file.
  bool Fits(uint64_t offset, uint64_t bytes) const {
    return offset <= size_ && bytes <= size_ - offset;
  }
  template <typename T>
  bool Read(uint64_t offset, T* out) const {
    if (!Fits(offset, sizeof(T))) return false;
    std::memcpy(out, data_ + offset, sizeof(T));
    return true;
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_;
  size_t size_;
};

struct Segment {
  uint64_t vaddr, memsz, offset, filesz;
  uint32_t flags;
};

// The largest page the dynamic loader may map with on x86-64 (Linux uses
// 4 KiB; a larger one only makes the no-shared-page rule stricter).
constexpr uint64_t kMaxPage = 4096;

class Checker {
 public:
  Checker(const uint8_t* data, size_t size) : file_(data, size) {}
  StatusOr<KernelLibrary> Run();

 private:
  Status CheckHeaderAndSegments();
  Status ReadDynamic();
  Status CheckHashTables();
  Status CheckSymbols(KernelLibrary& library);
  Status CheckRelocations(uint64_t vaddr, uint64_t bytes, const char* what);

  // The file offset of [vaddr, vaddr + bytes), which must lie in the file
  // part of one loaded segment.
  std::optional<uint64_t> FileOffset(uint64_t vaddr, uint64_t bytes) const {
    // Strictly inside: an address at a segment's end belongs to the next one.
    for (const Segment& s : loads_)
      if (vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz && bytes <= s.filesz - (vaddr - s.vaddr))
        return s.offset + (vaddr - s.vaddr);
    return std::nullopt;
  }
  // The loaded segment holding [vaddr, vaddr + bytes) in memory, if any.
  const Segment* MemorySegment(uint64_t vaddr, uint64_t bytes) const {
    for (const Segment& s : loads_)
      if (vaddr >= s.vaddr && vaddr - s.vaddr < s.memsz && bytes <= s.memsz - (vaddr - s.vaddr))
        return &s;
    return nullptr;
  }
  // A name: at most kMaxName bytes (so that many names pointing into one
  // long string cannot make the scan quadratic).
  static constexpr uint64_t kMaxName = 4096;
  std::optional<std::string> StringAt(uint64_t offset) const {
    if (offset >= strsz_) return std::nullopt;
    const uint8_t* begin = file_.data() + strtab_ + offset;
    const void* nul = std::memchr(begin, 0, std::min(strsz_ - offset, kMaxName + 1));
    if (nul == nullptr) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(begin),
                       static_cast<const uint8_t*>(nul) - begin);
  }

  Reader file_;
  std::vector<Segment> loads_;
  Segment dynamic_{};
  std::map<int64_t, uint64_t> tags_;  // the last value of each tag
  std::vector<uint64_t> needed_;      // DT_NEEDED string offsets
  uint64_t strtab_ = 0, strsz_ = 0, symtab_ = 0, symbols_ = 0;
};

Status Checker::CheckHeaderAndSegments() {
  Elf64_Ehdr header;
  if (!file_.Read(0, &header)) return Unsafe("shorter than an ELF header");
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) return Unsafe("not an ELF file");
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB ||
      header.e_machine != EM_X86_64)
    return Unsafe("not a 64-bit little-endian x86-64 object");
  if (header.e_type != ET_DYN) return Unsafe("not a shared object");
  if (header.e_phentsize != sizeof(Elf64_Phdr) || header.e_phnum == 0 || header.e_phnum > 64)
    return Unsafe("has " + std::to_string(header.e_phnum) + " program headers of " +
                  std::to_string(header.e_phentsize) + " bytes");
  if (!file_.Fits(header.e_phoff, uint64_t{header.e_phnum} * sizeof(Elf64_Phdr)))
    return Unsafe("its program headers lie past the end of its " +
                  std::to_string(file_.size()) + " bytes (truncated?)");
  bool stack = false, dynamic = false;
  // Headers the loader reads through their addresses, checked once the
  // segments are known.
  std::vector<Elf64_Phdr> by_address;
  for (uint16_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr ph;
    file_.Read(header.e_phoff + uint64_t{i} * sizeof(Elf64_Phdr), &ph);
    const std::string where = "program header " + std::to_string(i);
    switch (ph.p_type) {
      case PT_NULL:
        break;
      case PT_PHDR:
      case PT_GNU_RELRO:
      case PT_GNU_EH_FRAME:
        by_address.push_back(ph);
        break;
      case PT_LOAD: {
        if (!file_.Fits(ph.p_offset, ph.p_filesz))
          return Unsafe(where + " maps bytes [" + std::to_string(ph.p_offset) + ", " +
                        std::to_string(ph.p_offset + ph.p_filesz) + ") of a file of " +
                        std::to_string(file_.size()) + " (truncated?)");
        if (ph.p_filesz > ph.p_memsz || ph.p_memsz > (uint64_t{1} << 30) ||
            ph.p_vaddr > (uint64_t{1} << 40))
          return Unsafe(where + " has inconsistent sizes");
        if (ph.p_align > 1 && ((ph.p_align & (ph.p_align - 1)) != 0 ||
                               ph.p_offset % ph.p_align != ph.p_vaddr % ph.p_align))
          return Unsafe(where + " is misaligned");
        if ((ph.p_flags & PF_W) && (ph.p_flags & PF_X))
          return Unsafe(where + " is both writable and executable");
        // The loader maps whole pages: two segments sharing a page would let
        // the later one overlay bytes of the earlier one that this check read
        // from the file (say, a second dynamic section), so segments must not
        // share pages.
        if (!loads_.empty() &&
            (loads_.back().vaddr + loads_.back().memsz + kMaxPage - 1) / kMaxPage * kMaxPage >
                ph.p_vaddr / kMaxPage * kMaxPage)
          return Unsafe(where + " shares a page with, overlaps or precedes the segment before it");
        loads_.push_back({ph.p_vaddr, ph.p_memsz, ph.p_offset, ph.p_filesz, ph.p_flags});
        break;
      }
      case PT_DYNAMIC:
        if (dynamic) return Unsafe("has two dynamic sections");
        dynamic = true;
        dynamic_ = {ph.p_vaddr, ph.p_memsz, ph.p_offset, ph.p_filesz, ph.p_flags};
        break;
      case PT_GNU_STACK:
        if (ph.p_flags & PF_X) return Unsafe("asks for an executable stack");
        stack = true;
        break;
      case PT_INTERP:
        return Unsafe("names a program interpreter");
      case PT_TLS:
        return Unsafe("has thread-local storage");
      default:
        return Unsafe(where + " has type " + Hex(ph.p_type) + ", which graphc never writes");
    }
  }
  if (loads_.empty()) return Unsafe("has no loadable segment");
  if (!stack)
    return Unsafe("has no PT_GNU_STACK header (the stack would be executable)");
  if (!dynamic) return Unsafe("has no dynamic section");
  for (const Elf64_Phdr& ph : by_address) {
    // The program headers as loaded must be the ones checked here; the
    // exception-frame index and the RELRO range must lie in loaded memory
    // (RELRO in writable memory: it is made read-only after relocation).
    bool fits;
    if (ph.p_type == PT_PHDR) {
      fits = FileOffset(ph.p_vaddr, ph.p_filesz) == header.e_phoff &&
             ph.p_filesz == uint64_t{header.e_phnum} * sizeof(Elf64_Phdr);
    } else if (ph.p_type == PT_GNU_EH_FRAME) {
      fits = FileOffset(ph.p_vaddr, ph.p_filesz).has_value();
    } else {
      // The loader protects whole pages from the start to the end rounded
      // down: they must be pages of one writable segment.
      constexpr uint64_t kPage = 4096;
      const Segment* s = MemorySegment(ph.p_vaddr, 0);
      fits = s != nullptr && (s->flags & PF_W) && ph.p_memsz <= (uint64_t{1} << 30) &&
             (ph.p_vaddr + ph.p_memsz) / kPage * kPage <=
                 (s->vaddr + s->memsz + kPage - 1) / kPage * kPage;
    }
    if (!fits)
      return Unsafe("its " + std::string(ph.p_type == PT_PHDR          ? "PT_PHDR"
                                         : ph.p_type == PT_GNU_EH_FRAME ? "PT_GNU_EH_FRAME"
                                                                        : "PT_GNU_RELRO") +
                    " header points outside the segments it describes");
  }
  // The loader reads the dynamic section at its address: it must be these bytes.
  std::optional<uint64_t> at = FileOffset(dynamic_.vaddr, dynamic_.filesz);
  if (!at || *at != dynamic_.offset || dynamic_.filesz % sizeof(Elf64_Dyn) != 0 ||
      dynamic_.filesz == 0)
    return Unsafe("its dynamic section is not inside a loaded segment");
  return Status::Ok();
}

Status Checker::ReadDynamic() {
  bool terminated = false;
  for (uint64_t off = 0; off < dynamic_.filesz; off += sizeof(Elf64_Dyn)) {
    Elf64_Dyn entry;
    file_.Read(dynamic_.offset + off, &entry);
    if (entry.d_tag == DT_NULL) {
      terminated = true;
      break;
    }
    if (!AllowedTag(entry.d_tag))
      return Unsafe("has " + TagName(entry.d_tag) + "; graphc's kernels run no code when loaded");
    if (entry.d_tag == DT_NEEDED)
      needed_.push_back(entry.d_un.d_val);
    else if (tags_.count(entry.d_tag))
      return Unsafe("repeats " + std::string(*AllowedTag(entry.d_tag)));
    else
      tags_[entry.d_tag] = entry.d_un.d_val;
  }
  if (!terminated) return Unsafe("its dynamic section has no DT_NULL end");
  if (tags_.count(DT_FLAGS) && (tags_[DT_FLAGS] & DF_TEXTREL))
    return Unsafe("has relocations in code (DF_TEXTREL)");

  if (!tags_.count(DT_STRTAB) || !tags_.count(DT_STRSZ) || !tags_.count(DT_SYMTAB))
    return Unsafe("has no dynamic symbol or string table");
  if (tags_.count(DT_SYMENT) && tags_[DT_SYMENT] != sizeof(Elf64_Sym))
    return Unsafe("has symbols of " + std::to_string(tags_[DT_SYMENT]) + " bytes");
  strsz_ = tags_[DT_STRSZ];
  std::optional<uint64_t> strtab = FileOffset(tags_[DT_STRTAB], strsz_);
  if (!strtab || strsz_ == 0) return Unsafe("its string table is outside the file");
  strtab_ = *strtab;
  if (file_.data()[strtab_ + strsz_ - 1] != 0)
    return Unsafe("its string table does not end in NUL");
  static const std::set<std::string> kAllowedNeeded = {"libc.so.6", "libm.so.6"};
  for (uint64_t name : needed_) {
    std::optional<std::string> library = StringAt(name);
    if (!library) return Unsafe("has a DT_NEEDED outside its string table");
    if (!kAllowedNeeded.count(*library))
      return Unsafe("needs library '" + Printable(*library) + "' (allowed: libc.so.6, libm.so.6)");
  }
  if (tags_.count(DT_SONAME) && !StringAt(tags_[DT_SONAME]))
    return Unsafe("has a DT_SONAME outside its string table");
  // The loader may write its first three entries.
  if (tags_.count(DT_PLTGOT)) {
    const Segment* got = MemorySegment(tags_[DT_PLTGOT], 24);
    if (got == nullptr || !(got->flags & PF_W))
      return Unsafe("its DT_PLTGOT is not in writable memory");
  }
  return Status::Ok();
}

// The symbol count, from the hash tables the loader looks symbols up in; both
// must stay inside the file and the symbol table, or dlsym would read past them.
Status Checker::CheckHashTables() {
  const bool gnu = tags_.count(DT_GNU_HASH) != 0, sysv = tags_.count(DT_HASH) != 0;
  if (!gnu && !sysv) return Unsafe("has no symbol hash table");
  uint64_t count = 0;
  if (sysv) {
    std::optional<uint64_t> at = FileOffset(tags_[DT_HASH], 8);
    uint32_t header[2];
    if (!at || !file_.Read(*at, &header)) return Unsafe("its DT_HASH is outside the file");
    const uint64_t nbucket = header[0], nchain = header[1];
    std::optional<uint64_t> table = FileOffset(tags_[DT_HASH], 8 + 4 * (nbucket + nchain));
    if (!table || nchain > (uint64_t{1} << 24) || nbucket > (uint64_t{1} << 24))
      return Unsafe("its DT_HASH table is outside the file");
    for (uint64_t i = 0; i < nbucket + nchain; ++i) {
      uint32_t value = 0;
      file_.Read(*table + 8 + 4 * i, &value);
      if (value >= nchain) return Unsafe("its DT_HASH table indexes past its symbols");
    }
    count = nchain;
  }
  if (gnu) {
    std::optional<uint64_t> at = FileOffset(tags_[DT_GNU_HASH], 16);
    uint32_t header[4];
    if (!at || !file_.Read(*at, &header)) return Unsafe("its DT_GNU_HASH is outside the file");
    const uint64_t nbuckets = header[0], symoffset = header[1], bloom = header[2];
    if (nbuckets == 0 || nbuckets > (uint64_t{1} << 24) || bloom == 0 ||
        (bloom & (bloom - 1)) != 0 || bloom > (uint64_t{1} << 24) || header[3] >= 64)
      return Unsafe("its DT_GNU_HASH header is malformed");
    const uint64_t buckets = *at + 16 + 8 * bloom;
    if (!FileOffset(tags_[DT_GNU_HASH], 16 + 8 * bloom + 4 * nbuckets))
      return Unsafe("its DT_GNU_HASH buckets are outside the file");
    uint64_t last = 0;
    for (uint64_t i = 0; i < nbuckets; ++i) {
      uint32_t value = 0;
      file_.Read(buckets + 4 * i, &value);
      if (value != 0 && value < symoffset)
        return Unsafe("its DT_GNU_HASH buckets index below their first symbol");
      last = std::max<uint64_t>(last, value);
    }
    uint64_t gnu_count = symoffset;
    if (last != 0) {
      // Walk the last chain to its end marker (bit 0).
      const uint64_t chains = buckets + 4 * nbuckets;
      for (uint64_t i = last;; ++i) {
        uint32_t value = 0;
        if (i - symoffset > (uint64_t{1} << 24) ||
            !FileOffset(tags_[DT_GNU_HASH], 16 + 8 * bloom + 4 * nbuckets +
                                                 4 * (i - symoffset + 1)) ||
            !file_.Read(chains + 4 * (i - symoffset), &value))
          return Unsafe("its DT_GNU_HASH chains run past the file");
        if (value & 1) {
          gnu_count = i + 1;
          break;
        }
      }
    }
    if (sysv && gnu_count != count)
      return Unsafe("its two hash tables disagree on the number of symbols");
    count = gnu_count;
  }
  if (count > (uint64_t{1} << 24)) return Unsafe("has too many symbols");
  std::optional<uint64_t> symtab = FileOffset(tags_[DT_SYMTAB], count * sizeof(Elf64_Sym));
  if (!symtab) return Unsafe("its symbol table is outside the file");
  symtab_ = *symtab;
  symbols_ = count;
  return Status::Ok();
}

Status Checker::CheckSymbols(KernelLibrary& library) {
  const std::set<std::string>& allowed = AllowedKernelImports();
  const std::string entry_prefix = kKernelEntryPrefix, signature_prefix = kKernelSignaturePrefix;
  for (uint64_t i = 1; i < symbols_; ++i) {
    Elf64_Sym sym;
    file_.Read(symtab_ + i * sizeof(Elf64_Sym), &sym);
    std::optional<std::string> name = StringAt(sym.st_name);
    if (!name) return Unsafe("symbol " + std::to_string(i) + " has no name in the string table");
    const unsigned type = ELF64_ST_TYPE(sym.st_info);
    if (type == STT_GNU_IFUNC)
      return Unsafe("symbol '" + Printable(*name) + "' is an IFUNC (its resolver runs when loaded)");
    if (type == STT_TLS) return Unsafe("symbol '" + Printable(*name) + "' is thread-local");
    if (sym.st_shndx == SHN_UNDEF) {
      if (!name->empty() && !allowed.count(*name))
        return Unsafe("imports '" + Printable(*name) + "', which graphc's kernels never call");
      continue;
    }
    const bool is_entry = name->compare(0, entry_prefix.size(), entry_prefix) == 0;
    const bool is_signature = name->compare(0, signature_prefix.size(), signature_prefix) == 0;
    // A library defining, say, `system` and referring to it would be bound to
    // libc's (default symbols interpose), past the import allow-list.
    if (!is_entry && !is_signature && ELF64_ST_BIND(sym.st_info) != STB_LOCAL)
      return Unsafe("defines '" + Printable(*name) +
                    "'; graphc's kernels export only graphc_kernel_* and graphc_signature_*");
    if (is_entry) {
      const Segment* s = MemorySegment(sym.st_value, 1);
      if (type != STT_FUNC || s == nullptr || !(s->flags & PF_X))
        return Unsafe("'" + Printable(*name) + "' is not a function in an executable segment");
      library.entries.insert(name->substr(entry_prefix.size()));
    } else if (is_signature) {
      std::optional<uint64_t> at = FileOffset(sym.st_value, sym.st_size);
      if (type != STT_OBJECT || !at || sym.st_size == 0 || sym.st_size > 4096 ||
          file_.data()[*at + sym.st_size - 1] != 0)
        return Unsafe("'" + Printable(*name) + "' is not a NUL-terminated string in the file");
      library.signatures[name->substr(signature_prefix.size())] =
          std::string(reinterpret_cast<const char*>(file_.data() + *at));
    }
  }
  return Status::Ok();
}

// Relocation types that only add the load address or bind an imported symbol;
// IRELATIVE (which calls a resolver), COPY and the TLS types are refused.
Status Checker::CheckRelocations(uint64_t vaddr, uint64_t bytes, const char* what) {
  if (bytes == 0) return Status::Ok();
  std::optional<uint64_t> at = FileOffset(vaddr, bytes);
  if (!at || bytes % sizeof(Elf64_Rela) != 0)
    return Unsafe(std::string("its ") + what + " relocations are outside the file");
  for (uint64_t off = 0; off < bytes; off += sizeof(Elf64_Rela)) {
    Elf64_Rela rela;
    file_.Read(*at + off, &rela);
    const uint32_t type = ELF64_R_TYPE(rela.r_info);
    const uint64_t symbol = ELF64_R_SYM(rela.r_info);
    if (type != R_X86_64_RELATIVE && type != R_X86_64_GLOB_DAT && type != R_X86_64_JUMP_SLOT &&
        type != R_X86_64_64 && type != R_X86_64_NONE)
      return Unsafe("has a relocation of type " + std::to_string(type) +
                    (type == R_X86_64_IRELATIVE ? " (IRELATIVE: its resolver runs when loaded)"
                                                : ", which graphc's kernels never need"));
    if (symbol >= symbols_) return Unsafe("a relocation names a symbol past its table");
    if (symbol != 0) {
      // Only imports are bound by name (and the imports are allow-listed).
      Elf64_Sym sym;
      file_.Read(symtab_ + symbol * sizeof(Elf64_Sym), &sym);
      if (sym.st_shndx != SHN_UNDEF)
        return Unsafe("a relocation binds the library's own symbol " + std::to_string(symbol) +
                      " by name");
    }
    const Segment* s = MemorySegment(rela.r_offset, 8);
    if (type != R_X86_64_NONE && (s == nullptr || !(s->flags & PF_W)))
      return Unsafe("a relocation writes outside its writable segments");
  }
  return Status::Ok();
}

StatusOr<KernelLibrary> Checker::Run() {
  Status status = CheckHeaderAndSegments();
  if (status.ok()) status = ReadDynamic();
  if (status.ok()) status = CheckHashTables();
  KernelLibrary library;
  if (status.ok()) status = CheckSymbols(library);
  if (status.ok() && (tags_.count(DT_RELA) || tags_.count(DT_RELASZ))) {
    if (tags_.count(DT_RELAENT) && tags_[DT_RELAENT] != sizeof(Elf64_Rela))
      return Unsafe("has relocations of " + std::to_string(tags_[DT_RELAENT]) + " bytes");
    status = CheckRelocations(tags_[DT_RELA], tags_[DT_RELASZ], "dynamic");
  }
  if (status.ok() && (tags_.count(DT_JMPREL) || tags_.count(DT_PLTRELSZ))) {
    if (!tags_.count(DT_PLTREL) || tags_[DT_PLTREL] != DT_RELA)
      return Unsafe("its PLT relocations are not RELA");
    status = CheckRelocations(tags_[DT_JMPREL], tags_[DT_PLTRELSZ], "PLT");
  }
  if (!status.ok()) return status;
  return library;
}

}  // namespace

const std::set<std::string>& AllowedKernelImports() {
  static const std::set<std::string> kAllowed = {
      "memset", "memcpy", "memmove",                      // fills and copies
      "expf", "exp", "logf", "log", "sqrtf", "sqrt",      // elementwise math
      "cosf", "cos", "powf", "pow", "floorf", "floor",    // learning-rate schedules
      "fmaf", "fma",
  };
  return kAllowed;
}

StatusOr<KernelLibrary> CheckKernelLibrary(const uint8_t* data, size_t size) {
  if (data == nullptr) return Unsafe("is empty");
  return Checker(data, size).Run();
}

}  // namespace graphc::runtime
