/* The posix_spawn file actions glibc declares only for _GNU_SOURCE, which Swift's Glibc
 * module is built without. Every symbol is prefixed pushd_spawn_. */
#ifndef PUSHD_CSPAWN_H
#define PUSHD_CSPAWN_H

#include <spawn.h>

/* Closes every descriptor from lowest on in the child (glibc 2.34+). Returns 0 or errno. */
int pushd_spawn_close_from(posix_spawn_file_actions_t *actions, int lowest);
/* Makes the child start in directory (glibc 2.29+). Returns 0 or errno. */
int pushd_spawn_chdir(posix_spawn_file_actions_t *actions, const char *directory);

#endif
