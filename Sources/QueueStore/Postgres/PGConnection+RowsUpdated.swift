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
