/*
 * Redirecting a function that loaded libraries import, in place: each library calling it
 * through its PLT jumps via a slot of its GOT, and rewriting that slot sends its calls to a
 * replacement. It is what LD_PRELOAD does when a library is loaded, done later and for
 * libraries LD_PRELOAD cannot reach (Python's ctypes loads llama.cpp into a local scope).
 *
 * The original a slot resolves to is found by name in the library's own scope (dlsym on
 * its handle), not read from the slot: with lazy binding the slot may still hold the PLT's
 * resolver stub, which would overwrite our slot on its first call.
 *
 * Where ggml-viz's preload library is in the process too (`ggml-viz run -- python ...`), it
 * interposes some of these functions by name: its own references to them stay its own (it
 * finds the function it wraps from its own address), and a library's reference to a function
 * it defines itself, which its own scope resolves to itself, is bound to the preload
 * library's at run time: left as it is, not counted as failed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "got_hook.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#define RELOC_JUMP_SLOT R_X86_64_JUMP_SLOT
#define RELOC_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define RELOC_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define RELOC_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

typedef struct {
    const char *symbol;
    GotReplacement replace;
    void *context;
    int patched, failed;
    void *preload_base; /* where ggml-viz's preload library is loaded (NULL: it is not) */
} HookRequest;

/* The dynamic section's addresses: glibc relocates most of them in place, the vDSO's not. */
static uintptr_t dynamic_address(const struct dl_phdr_info *info, ElfW(Addr) value) {
    return value < info->dlpi_addr ? info->dlpi_addr + value : value;
}

static int write_slot(const struct dl_phdr_info *info, void **slot, void *value) {
    if (*slot == value) return 0;
    uintptr_t page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    void *page = (void *)((uintptr_t)slot & ~(page_size - 1));
    int read_only_after = 0; /* RELRO: the loader made the slot read-only once relocated */
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_GNU_RELRO && (uintptr_t)slot >= start && (uintptr_t)slot < start + ph->p_memsz)
            read_only_after = 1;
    }
    if (read_only_after && mprotect(page, page_size, PROT_READ | PROT_WRITE) != 0) return -1;
    __atomic_store_n(slot, value, __ATOMIC_SEQ_CST); /* threads calling meanwhile see old or new */
    if (read_only_after) mprotect(page, page_size, PROT_READ);
    return 0;
}

static int hook_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
#if defined(RELOC_JUMP_SLOT)
    HookRequest *request = (HookRequest *)data;
    const ElfW(Dyn) *dynamic = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    }
    if (!dynamic) return 0;
    const ElfW(Sym) *symbols = NULL;
    const char *strings = NULL;
    const ElfW(Rela) * tables[2] = {NULL, NULL};
    size_t table_bytes[2] = {0, 0};
    for (const ElfW(Dyn) *d = dynamic; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symbols = (const ElfW(Sym) *)dynamic_address(info, d->d_un.d_ptr); break;
        case DT_STRTAB: strings = (const char *)dynamic_address(info, d->d_un.d_ptr); break;
        case DT_JMPREL: tables[0] = (const ElfW(Rela) *)dynamic_address(info, d->d_un.d_ptr); break;
        case DT_PLTRELSZ: table_bytes[0] = d->d_un.d_val; break;
        case DT_RELA: tables[1] = (const ElfW(Rela) *)dynamic_address(info, d->d_un.d_ptr); break;
        case DT_RELASZ: table_bytes[1] = d->d_un.d_val; break;
        default: break;
        }
    }
    if (!symbols || !strings) return 0;
    if (request->preload_base && (void *)info->dlpi_addr == request->preload_base) return 0;
    void *original = NULL;
    for (int t = 0; t < 2; t++) {
        if (!tables[t]) continue;
        for (size_t i = 0; i < table_bytes[t] / sizeof(ElfW(Rela)); i++) {
            const ElfW(Rela) *rela = &tables[t][i];
            unsigned long type = ELF64_R_TYPE(rela->r_info);
            if (type != RELOC_JUMP_SLOT && type != RELOC_GLOB_DAT) continue;
            const ElfW(Sym) *symbol = &symbols[ELF64_R_SYM(rela->r_info)];
            if (strcmp(strings + symbol->st_name, request->symbol) != 0) continue;
            void **slot = (void **)(info->dlpi_addr + rela->r_offset);
            if (!original) {
                void *handle = dlopen(info->dlpi_name[0] ? info->dlpi_name : NULL, RTLD_LAZY | RTLD_NOLOAD);
                if (handle) {
                    original = dlsym(handle, request->symbol);
                    dlclose(handle);
                }
            }
            void *replacement = original ? request->replace(original, request->context) : NULL;
            if (!replacement && original && request->preload_base && symbol->st_shndx != SHN_UNDEF &&
                dlsym(RTLD_DEFAULT, request->symbol) != original) {
                continue; /* its own function, interposed at run time by another's (the preload library's) */
            }
            if (replacement && write_slot(info, slot, replacement) == 0) request->patched++;
            else request->failed++;
        }
    }
#else
    (void)info;
    (void)data;
#endif
    return 0;
}

int got_hook(const char *symbol, GotReplacement replace, void *context, int *failed) {
    HookRequest request = {symbol, replace, context, 0, 0, NULL};
    void *claim = dlsym(RTLD_DEFAULT, "ggml_viz_preload_claim");
    Dl_info where;
    if (claim && dladdr(claim, &where)) request.preload_base = where.dli_fbase;
    dl_iterate_phdr(hook_object, &request);
    if (failed) *failed = request.failed;
    return request.patched;
}
