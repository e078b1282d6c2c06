extension PGConnection {
    /// Runs `update` (an `UPDATE` without `RETURNING`, prepared once per connection) and returns
    /// how many rows it changed.
    func rowsUpdated(by update: String, _ parameters: [any PGParameter]) throws -> Int {
        try query(prepared("WITH changed AS (\(update) RETURNING 1) SELECT count(*) FROM changed"), parameters)
            .require(Int.self, row: 0, column: 0)
    }
}
