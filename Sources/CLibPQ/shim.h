/* Typed wrappers for libpq macros. Every symbol is prefixed pushd_pq_. */
#ifndef PUSHD_CLIBPQ_SHIM_H
#define PUSHD_CLIBPQ_SHIM_H

#include <libpq-fe.h>

static inline char *pushd_pq_result_sqlstate(const PGresult *r) { return PQresultErrorField(r, PG_DIAG_SQLSTATE); }
static inline char *pushd_pq_result_detail(const PGresult *r) { return PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL); }
static inline char *pushd_pq_result_hint(const PGresult *r) { return PQresultErrorField(r, PG_DIAG_MESSAGE_HINT); }
static inline char *pushd_pq_result_primary(const PGresult *r) { return PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY); }
static inline char *pushd_pq_result_constraint(const PGresult *r) { return PQresultErrorField(r, PG_DIAG_CONSTRAINT_NAME); }
static inline char *pushd_pq_result_column(const PGresult *r) { return PQresultErrorField(r, PG_DIAG_COLUMN_NAME); }
static inline char *pushd_pq_result_table(const PGresult *r) { return PQresultErrorField(r, PG_DIAG_TABLE_NAME); }
static inline char *pushd_pq_result_severity(const PGresult *r) { return PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED); }

#endif
