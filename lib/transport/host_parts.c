/*
 * host_parts.c — see host_parts.h. A part is mapped through the owner's file descriptor, which
 * the owner keeps open until every rank has said that it mapped every part; after that the
 * mappings alone keep the memory.
 */
#include "host_parts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* What each rank tells the others of its part. */
struct part_record {
    int64_t pid;
    int64_t file; /* -1: this rank has no part */
};

static unsigned char *map_file(int file, size_t bytes)
{
    void *mapping = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
    return mapping == MAP_FAILED ? NULL : mapping;
}

/* This rank's part: a zeroed memory file, mapped; its descriptor into `file` (-1 on failure,
 * with why in `error`). */
static unsigned char *make_own_part(size_t bytes, int *file, char *error, size_t error_size)
{
    *file = memfd_create("chorus-host-part", MFD_CLOEXEC);
    unsigned char *part = NULL;
    if (*file >= 0 && ftruncate(*file, (off_t)bytes) == 0)
        part = map_file(*file, bytes);
    if (part == NULL) {
        snprintf(error, error_size, "making a shared part of %zu bytes failed: %s", bytes,
                 strerror(errno));
        if (*file >= 0)
            close(*file);
        *file = -1;
        return NULL;
    }
    memset(part, 0, bytes); /* near this rank, and no page faults in the first calls */
    return part;
}

/* Maps local rank r's part from its process's descriptor. */
static unsigned char *map_peer_part(const struct part_record *record, size_t bytes)
{
    if (record->file < 0)
        return NULL;
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)record->pid,
             (long long)record->file);
    int file = open(path, O_RDWR | O_CLOEXEC);
    if (file < 0)
        return NULL;
    unsigned char *part = map_file(file, bytes);
    close(file);
    return part;
}

bool host_parts_create(struct host_parts *parts, const struct host_exchange *exchange,
                       size_t bytes, char *error, size_t error_size)
{
    int count = exchange->local_size, me = exchange->local_rank;
    *parts = (struct host_parts){.count = count, .bytes = bytes};
    struct part_record records[HOST_MAX_RANKS];
    int own_file = -1;
    uint64_t mapped = 0;
    error[0] = '\0';
    if (count > HOST_MAX_RANKS)
        return false; /* the callers refuse such a host first */
    parts->part[me] = make_own_part(bytes, &own_file, error, error_size);
    struct part_record mine = {.pid = getpid(), .file = own_file};
    /* Every rank takes part in both exchanges, whatever failed here: the others wait for it. */
    bool exchanged = exchange->allgather(exchange->context, &mine, sizeof mine, records);
    if (exchanged && parts->part[me] != NULL) {
        mapped = 1;
        for (int r = 0; r < count; r++) {
            if (r != me && (parts->part[r] = map_peer_part(&records[r], bytes)) == NULL)
                mapped = 0;
        }
        if (!mapped)
            snprintf(error, error_size, "mapping the shared parts of this host's ranks through "
                     "/proc/<pid>/fd failed: %s", strerror(errno));
    }
    if (!exchange->minimum(exchange->context, &mapped, 1))
        mapped = 0;
    if (own_file >= 0)
        close(own_file);
    if (mapped)
        return true;
    if (error[0] == '\0')
        snprintf(error, error_size, "a rank of this host could not make or map its shared part");
    host_parts_destroy(parts);
    return false;
}

void host_parts_destroy(struct host_parts *parts)
{
    for (int r = 0; r < parts->count; r++) {
        if (parts->part[r] != NULL)
            munmap(parts->part[r], parts->bytes);
    }
    *parts = (struct host_parts){0};
}
