/* libyaml for the configuration file. Every added symbol is prefixed pushd_yaml_. */
#ifndef PUSHD_CYAML_SHIM_H
#define PUSHD_CYAML_SHIM_H

#include <yaml.h>

static inline const char *pushd_yaml_version_string(void) { return yaml_get_version_string(); }

#endif
