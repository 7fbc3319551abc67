/*
 * name_table.h — a hash table from tensor names to pointers (separate chaining, grows at load
 * factor 1); removed entries are reused by later inserts. Not thread-safe: each table has one
 * owner or one lock. A name is a process set's: the key is (set, name), so that the same name
 * may be in flight in two sets at once and a user's name is never rewritten to tell them apart
 * (tables of one set alone, or of none, pass 0).
 */
#ifndef CHORUS_NAME_TABLE_H
#define CHORUS_NAME_TABLE_H

#include "common.h"

struct name_entry {
    char *name; /* the entry's own copy, in `storage` */
    int set;    /* the process set whose name it is */
    void *value;
    struct name_entry *next;
    size_t capacity; /* bytes of `storage` */
    char storage[];
};

struct name_table {
    struct name_entry **buckets;
    size_t bucket_count;
    size_t size;
    /* Removed entries kept for the next inserts, so that a steady stream of names in flight
     * (the same few, step after step) allocates nothing. At most NAME_TABLE_SPARES. */
    struct name_entry *spares;
    size_t spare_count;
};

void name_table_init(struct name_table *table);
/* Frees the table's own memory; the values are the caller's. */
void name_table_destroy(struct name_table *table);
/* NULL when absent. */
void *name_table_find(const struct name_table *table, int set, const char *name);
/* Adds (set, name) -> value; false if the key is present or memory ran out. */
bool name_table_insert(struct name_table *table, int set, const char *name, void *value);
/* Removes the key and returns its value (NULL when absent). */
void *name_table_remove(struct name_table *table, int set, const char *name);

#endif
