extension PGConnection {
    /// Runs `update` (an `UPDATE` without `RETURNING`, prepared once per connection) and returns
    /// how many rows it changed.
    func rowsUpdated(by update: String, _ parameters: [any PGParameter]) throws -> Int {
        try query(prepared("WITH changed AS (\(update) RETURNING 1) SELECT count(*) FROM changed"), parameters)
            .require(Int.self, row: 0, column: 0)
    }

    /// Runs `update`, whose last parameter is a row limit (`batch`, appended to `parameters`),
    /// until a run changes fewer rows than that, and returns how many rows changed in all. Each
    /// run is a statement of its own (committed on its own outside a transaction): one UPDATE
    /// of millions of rows can outrun the statement timeout and roll back, every time.
    func rowsUpdated(inBatchesOf batch: Int, by update: String, _ parameters: [any PGParameter]) throws -> Int {
        precondition(batch > 0, "a batch of \(batch) rows")
        var total = 0
        while true {
            let changed = try rowsUpdated(by: update, parameters + [batch])
            total += changed
            if changed < batch { return total }
        }
    }
}

extension PGConnection {
    /// Runs `update` as `rowsUpdated(by:)` does. When a CHECK constraint refuses a row it writes
    /// (SQLSTATE 23514; typically one an operator or a migration added NOT VALID after the row
    /// was written, which exempts it only until it is written again), the statement changed
    /// nothing; then `candidates` (the ids `update` would have written: a SELECT of one bigint
    /// column, with `candidateParameters`, nil: the same parameters) is read, and `row` (`$1` the id, then `rowParameters`)
    /// writes them one at a time, each a statement of its own. `settle` is given each id a check
    /// refused, with the error, and says whether it took the row out of the way (to dead
    /// letters). Returns the rows changed and the refused ones settled. Outside a transaction
    /// only: the first refusal ends the statement, not a transaction around it.
    func rowsUpdated(by update: String, _ parameters: [any PGParameter], orOneByOne candidates: String,
                     _ candidateParameters: [any PGParameter]? = nil, row: String, _ rowParameters: [any PGParameter],
                     settle: (Int64, PGError) throws -> Bool) throws -> (changed: Int, settled: Int) {
        do {
            return (try rowsUpdated(by: update, parameters), 0)
        } catch let error as PGError where error.code == .checkViolation {}
        let ids = try query(prepared(candidates), candidateParameters ?? parameters)
        var changed = 0
        var settled = 0
        for index in 0..<ids.rowCount {
            let id = try ids.require(Int64.self, row: index, column: 0)
            do {
                changed += try rowsUpdated(by: row, [id] + rowParameters)
            } catch let error as PGError where error.code == .checkViolation {
                if try settle(id, error) { settled += 1 }
            }
        }
        return (changed, settled)
    }
}
