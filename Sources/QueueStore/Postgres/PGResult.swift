internal import CLibPQ

/// The rows of a completed statement, read in text format.
///
/// Immutable after creation; libpq allows concurrent reads of a result, so it may
/// be shared between threads. The underlying `PGresult` is freed on deinit.
public final class PGResult: @unchecked Sendable {
    private let handle: OpaquePointer
    public let rowCount: Int
    public let columnCount: Int
    /// Rows affected by INSERT, UPDATE, DELETE, COPY and friends; 0 when not reported.
    public let affectedRows: Int
    /// For the result of describing a prepared statement: how many parameters it takes.
    let parameterCount: Int

    init(taking handle: OpaquePointer) {
        self.handle = handle
        rowCount = Int(PQntuples(handle))
        columnCount = Int(PQnfields(handle))
        affectedRows = Int(String(cString: PQcmdTuples(handle))) ?? 0
        parameterCount = Int(PQnparams(handle))
    }

    deinit { PQclear(handle) }

    public func columnName(_ column: Int) -> String {
        String(cString: PQfname(handle, Int32(column)))
    }

    public var columnNames: [String] { (0..<columnCount).map(columnName) }

    public func isNull(row: Int, column: Int) -> Bool {
        PQgetisnull(handle, Int32(row), Int32(column)) == 1
    }

    /// Calls `body` with the cell's bytes, or with `nil` for SQL NULL. The bytes live
    /// as long as this result; do not let them escape.
    public func withBytes<T>(row: Int, column: Int, _ body: (UnsafeBufferPointer<UInt8>?) throws -> T) rethrows -> T {
        precondition(row >= 0 && row < rowCount && column >= 0 && column < columnCount,
                     "cell (\(row), \(column)) is outside a result of \(rowCount)×\(columnCount)")
        if PQgetisnull(handle, Int32(row), Int32(column)) == 1 { return try body(nil) }
        let length = Int(PQgetlength(handle, Int32(row), Int32(column)))
        let pointer = PQgetvalue(handle, Int32(row), Int32(column))!
        return try pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
            try body(UnsafeBufferPointer(start: $0, count: length))
        }
    }

    /// The cell decoded as `T`, `nil` for SQL NULL; throws when the text is not a `T`, and when
    /// the result has no such cell (a statement that found no row), rather than trapping.
    public func get<T: PGDecodable>(_ type: T.Type = T.self, row: Int, column: Int) throws -> T? {
        guard row >= 0 && row < rowCount && column >= 0 && column < columnCount else {
            throw PGError(code: .clientEncoding,
                          message: "no cell (\(row), \(column)) in a result of \(rowCount) rows × \(columnCount) columns")
        }
        return try withBytes(row: row, column: column) { bytes in
            guard let bytes else { return nil }
            guard let value = T(pgBytes: bytes) else {
                let text = String(decoding: bytes.prefix(80), as: UTF8.self)
                throw PGError(code: .clientEncoding,
                              message: "column \(column) (\(columnName(column))) of row \(row) is not a \(T.self): '\(text)'")
            }
            return value
        }
    }

    /// The cell decoded as `T`; throws for SQL NULL as well as for text that is not a `T`.
    public func require<T: PGDecodable>(_ type: T.Type = T.self, row: Int, column: Int) throws -> T {
        guard let value = try get(T.self, row: row, column: column) else {
            throw PGError(code: .clientEncoding,
                          message: "column \(column) (\(columnName(column))) of row \(row) is NULL, expected a \(T.self)")
        }
        return value
    }

    public subscript(row: Int) -> PGRow { PGRow(result: self, index: row) }

    public var rows: [PGRow] { (0..<rowCount).map { PGRow(result: self, index: $0) } }
}

/// One row of a `PGResult`, read by column index.
public struct PGRow: Sendable {
    public let result: PGResult
    public let index: Int

    public func get<T: PGDecodable>(_ column: Int, as type: T.Type = T.self) throws -> T? {
        try result.get(T.self, row: index, column: column)
    }

    public func require<T: PGDecodable>(_ column: Int, as type: T.Type = T.self) throws -> T {
        try result.require(T.self, row: index, column: column)
    }

    public func isNull(_ column: Int) -> Bool { result.isNull(row: index, column: column) }
}
