/*
 * name_table.h — a hash table from tensor names to pointers (separate chaining, grows at load
 * factor 1). Not thread-safe: each table has one owner or one lock.
 */
#ifndef CHORUS_NAME_TABLE_H
#define CHORUS_NAME_TABLE_H

#include "common.h"

struct name_entry {
    char *name;
    void *value;
    struct name_entry *next;
};

struct name_table {
    struct name_entry **buckets;
    size_t bucket_count;
    size_t size;
};

void name_table_init(struct name_table *table);
/* Frees the table's own memory; the values are the caller's. */
void name_table_destroy(struct name_table *table);
/* NULL when absent. */
void *name_table_find(const struct name_table *table, const char *name);
/* Adds name -> value; false if the name is present or memory ran out. */
bool name_table_insert(struct name_table *table, const char *name, void *value);
/* Removes the name and returns its value (NULL when absent). */
void *name_table_remove(struct name_table *table, const char *name);

#endif
