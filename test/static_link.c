/*
 * static_link.c — a program linked against the installed libchorus.a, with functions of its own
 * named as chorus's internal ones once were (fatal, coordinate, clock_seconds,
 * text_format): it must link (the archive's internal symbols are local) and its allreduce
 * must be right. Run by check_static_link.sh.
 */
#include <chorus.h>
#include <stdio.h>
#include <string.h>

void fatal(const char *what);
int coordinate(void);
double clock_seconds(void);
char *text_format(const char *format, ...);

void fatal(const char *what)
{
    fprintf(stderr, "static_link: %s\n", what);
}
int coordinate(void)
{
    return 7;
}
double clock_seconds(void)
{
    return 1.0;
}
char *text_format(const char *format, ...)
{
    return (char *)format;
}

int main(void)
{
    if (chorus_init(NULL) != CHORUS_OK) {
        fatal(chorus_last_error());
        return 1;
    }
    int32_t values[3] = {chorus_rank() + 1, 2, coordinate()};
    chorus_tensor tensor = {.data = values, .dtype = CHORUS_INT32, .ndims = 1, .shape = {3}};
    int size = chorus_size();
    chorus_status status = chorus_allreduce("static.link", &tensor, NULL, CHORUS_SUM);
    int32_t expected[3] = {size * (size + 1) / 2, 2 * size, 7 * size};
    bool right = status == CHORUS_OK && memcmp(values, expected, sizeof values) == 0;
    if (!right)
        fprintf(stderr, "static_link: %s: got %d %d %d\n", chorus_status_name(status), values[0],
                values[1], values[2]);
    else if (chorus_rank() == 0)
        printf("static_link: chorus %s, allreduce right on %d ranks\n", chorus_version(), size);
    chorus_shutdown();
    return right ? 0 : 1;
}
