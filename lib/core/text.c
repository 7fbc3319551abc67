/*
 * text.c — formatted text in malloc'd strings, for messages (common.h).
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *text_format_va(const char *format, va_list args)
{
    va_list copy;
    va_copy(copy, args);
    int length = vsnprintf(NULL, 0, format, copy);
    va_end(copy);
    if (length < 0)
        return NULL;
    char *text = malloc((size_t)length + 1);
    if (text != NULL)
        vsnprintf(text, (size_t)length + 1, format, args);
    return text;
}

char *text_format(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    char *text = text_format_va(format, args);
    va_end(args);
    return text;
}

void text_append(char **text, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    char *tail = text_format_va(format, args);
    va_end(args);
    if (tail == NULL)
        return;
    size_t old_length = *text ? strlen(*text) : 0;
    char *grown = realloc(*text, old_length + strlen(tail) + 1);
    if (grown != NULL) {
        memcpy(grown + old_length, tail, strlen(tail) + 1);
        *text = grown;
    }
    free(tail);
}

char *text_rank_list(const int *ranks, size_t count)
{
    char *text = text_format("%s", "");
    for (size_t i = 0; i < count;) {
        size_t run_end = i;
        while (run_end + 1 < count && ranks[run_end + 1] == ranks[run_end] + 1)
            run_end++;
        const char *separator = i == 0 ? "" : ",";
        if (run_end == i)
            text_append(&text, "%s%d", separator, ranks[i]);
        else
            text_append(&text, "%s%d-%d", separator, ranks[i], ranks[run_end]);
        i = run_end + 1;
    }
    return text;
}

uint64_t text_digest(const void *bytes, size_t length)
{
    const unsigned char *at = bytes;
    uint64_t digest = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < length; i++)
        digest = (digest ^ at[i]) * UINT64_C(1099511628211);
    return digest;
}
