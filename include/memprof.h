/* memprof: the C ABI of the memprof heap profiler.
 *
 * C libraries and custom allocators linked into a Rust program that uses memprof::MemProf as its
 * global allocator report their own blocks here; they then appear in every memprof report, with
 * the C caller's stack. The report functions write to an open file descriptor (handy from C and
 * from a debugger: `call memprof_write_report(2)`).
 */
#ifndef MEMPROF_H
#define MEMPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Records a block of `size` bytes the caller just allocated at `ptr`. NULL is ignored.
 *
 * The block must be real memory, readable from `ptr` for `size` bytes until its free is recorded:
 * the object-graph functions (log_object_sizes, pretty_log_object_graph and the other object_graph
 * reports) read every live block memprof knows of, these included, looking for pointers. A made-up
 * address, or a block freed or unmapped without memprof_record_free, makes them read memory that is
 * not there and crash the program. */
void memprof_record_alloc(void *ptr, size_t size);

/* Records that the block at `ptr` is about to be freed: call it *before* freeing, so that a
 * thread that gets the same address from the allocator meanwhile is not confused with it, and so
 * that the object-graph scanner no longer reads it. Unknown pointers and NULL are ignored. */
void memprof_record_free(void *ptr);

/* Records a successful reallocation of the block that was at `old_address` (0 for none) to
 * `new_ptr` with `new_size` bytes (readable, as for memprof_record_alloc). The old block is named by its address only: after realloc its
 * pointer may no longer be used. In a multi-threaded allocator, prefer memprof_record_free(old)
 * before the realloc and memprof_record_alloc(new) after it, for the reason given above. */
void memprof_record_realloc(uintptr_t old_address, void *new_ptr, size_t new_size);

/* Writes the Markdown report of live allocations to `fd` (not closed). Returns 0, or -1 on error. */
int memprof_write_report(int fd);

/* Writes the TSV log of live allocations to `fd` (not closed). Returns 0, or -1 on error. */
int memprof_write_log(int fd);

#ifdef __cplusplus
}
#endif

#endif /* MEMPROF_H */
