/*
 * gradient_list.h — the gradient sizes of real models (the team's shared/data: one gradient a
 * line, "ELEMENTS NAME DIMxDIMx..."), for the workloads of chorus-bench and negotiation-scale.
 */
#ifndef CHORUS_BENCH_GRADIENT_LIST_H
#define CHORUS_BENCH_GRADIENT_LIST_H

#include <stdio.h>

/* Opens the gradient list of `workload`: a file, or a model name ("resnet50", "bert") looked up
 * in $CHORUS_DATA_DIR, ./shared/data, ../shared/data, and from the program's own directory (a
 * build tree's build/bench/ or build/tools/...) the shared/data beside the source tree. The
 * path found goes to `path`; NULL when there is none. */
FILE *gradient_list_open(const char *workload, char *path, size_t path_size);

#endif
