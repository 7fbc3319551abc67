/*
 * test_shared_heap.c — the process's shared heap (lib/transport/shared_heap.h): blocks do not
 * overlap, freed ranges are reused and come back zeroed, offsets name exactly the heap's range,
 * foreign pointers are refused, and a child of fork() gets a heap of its own instead of
 * allocating over its parent's blocks.
 */
#include "../../lib/transport/shared_heap.h"

#include "../common/check_runner.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char error[256];

/* How many of `bytes` bytes at `at` differ from `value`. */
static size_t differing(const unsigned char *at, size_t bytes, unsigned value)
{
    size_t count = 0;
    for (size_t b = 0; b < bytes; b++)
        count += at[b] != value;
    return count;
}

START_TEST(blocks_are_disjoint_and_freed_ranges_come_back_zeroed)
{
    static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 1 << 20, 12345, 7};
    unsigned char *blocks[8];
    for (int i = 0; i < 8; i++) {
        blocks[i] = shared_heap_alloc(sizes[i], error, sizeof error);
        ck_assert_msg(blocks[i] != NULL, "%s", error);
        ck_assert_uint_eq((uintptr_t)blocks[i] % 4096, 0);
        ck_assert_uint_eq(differing(blocks[i], sizes[i], 0), 0);
        memset(blocks[i], i + 1, sizes[i]);
    }
    /* Every block still holds its own pattern: none overlaps another. */
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(differing(blocks[i], sizes[i], (unsigned)(i + 1)), 0);
    ck_assert(shared_heap_free(blocks[5]));
    ck_assert(!shared_heap_free(blocks[5])); /* twice */
    unsigned char *again = shared_heap_alloc(1 << 20, error, sizeof error);
    ck_assert_ptr_eq(again, blocks[5]); /* first fit: the freed range */
    ck_assert_uint_eq(differing(again, 1 << 20, 0), 0);
    for (int i = 0; i < 8; i++)
        ck_assert(shared_heap_free(blocks[i]));
}
END_TEST

START_TEST(offsets_cover_the_heap_and_nothing_else)
{
    unsigned char *block = shared_heap_alloc(8192, error, sizeof error);
    ck_assert_ptr_nonnull(block);
    unsigned char *base = shared_heap_base();
    ck_assert_uint_eq(shared_heap_offset(block, 8192), (uint64_t)(block - base));
    ck_assert_uint_eq(shared_heap_offset(block + 100, 10), (uint64_t)(block + 100 - base));
    int on_stack = 0;
    ck_assert_uint_eq(shared_heap_offset(&on_stack, sizeof on_stack), SHARED_HEAP_NOWHERE);
    void *elsewhere = malloc(64);
    ck_assert_uint_eq(shared_heap_offset(elsewhere, 64), SHARED_HEAP_NOWHERE);
    ck_assert(!shared_heap_free(elsewhere));
    ck_assert(!shared_heap_free(block + 4096)); /* not the start of a block */
    ck_assert_uint_eq(shared_heap_offset(block, SIZE_MAX), SHARED_HEAP_NOWHERE);
    free(elsewhere);
    ck_assert(shared_heap_free(block));
}
END_TEST

START_TEST(more_than_the_reservation_is_refused_with_a_reason)
{
    ck_assert_ptr_null(shared_heap_alloc((size_t)1 << 62, error, sizeof error));
    ck_assert_msg(strstr(error, "no free range") != NULL, "%s", error);
    ck_assert_ptr_null(shared_heap_alloc(SIZE_MAX, error, sizeof error));
    ck_assert_msg(strstr(error, "more than the shared heap") != NULL, "%s", error);
}
END_TEST

START_TEST(a_forked_child_allocates_in_a_heap_of_its_own)
{
    unsigned char *parents = shared_heap_alloc(65536, error, sizeof error);
    ck_assert_ptr_nonnull(parents);
    memset(parents, 0x5a, 65536);
    pid_t child = fork();
    if (child == 0) {
        unsigned char *childs = shared_heap_alloc(65536, error, sizeof error);
        /* Its heap is new: the parent's block is no block of its heap. */
        bool separate = childs != NULL && childs != parents &&
                        shared_heap_offset(parents, 1) == SHARED_HEAP_NOWHERE;
        if (childs != NULL)
            memset(childs, 0xa5, 65536);
        _exit(separate && parents[0] == 0x5a ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_uint_eq(differing(parents, 65536, 0x5a), 0);
    ck_assert(shared_heap_free(parents));
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("shared_heap");
    TCase *heap = tcase_create("heap");
    tcase_add_test(heap, blocks_are_disjoint_and_freed_ranges_come_back_zeroed);
    tcase_add_test(heap, offsets_cover_the_heap_and_nothing_else);
    tcase_add_test(heap, more_than_the_reservation_is_refused_with_a_reason);
    tcase_add_test(heap, a_forked_child_allocates_in_a_heap_of_its_own);
    suite_add_tcase(suite, heap);
    return run_suite(suite);
}
