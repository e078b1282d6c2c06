import PushdTestSupport
import Posix
import Foundation
import QueueStore
import Testing

@Suite struct PGConnectionTests {
    @Test func connectsToAServerOfVersion15OrLater() throws {
        let connection = try TestDatabase.connect()
        #expect(connection.serverVersion >= 150_000)
        #expect(PGConnection.libpqVersion >= 150_000)
        let zone = try connection.query("SHOW TimeZone").require(String.self, row: 0, column: 0)
        #expect(zone == "UTC")
    }

    /// A statement that found no row is an error to read a cell of, never a trap.
    @Test func readingACellOfAnEmptyResultThrowsSayingSo() throws {
        let connection = try TestDatabase.connect()
        let empty = try connection.query("SELECT 1 WHERE false")
        #expect(throws: PGError.self) { try empty.require(Int.self, row: 0, column: 0) }
        do {
            _ = try empty.get(Int.self, row: 0, column: 1)
            Issue.record("no error")
        } catch {
            #expect("\(error)".contains("no cell (0, 1) in a result of 0 rows × 1 columns"), "\(error)")
        }
    }

    @Test func badURLNamesTheServerAndHidesThePassword() {
        do {
            _ = try PGConnection(url: "postgresql://someone:secret@127.0.0.1:1/nowhere?connect_timeout=2")
            Issue.record("connecting to port 1 succeeded")
        } catch let error as PGError {
            #expect(error.code == .connectionFailure)
            #expect(error.message.contains("127.0.0.1:1"))
            #expect(!error.description.contains("secret"))
        } catch {
            Issue.record("unexpected error \(error)")
        }
    }

    @Test func roundTripsEveryParameterType() throws {
        let connection = try TestDatabase.connect()
        let text = "héllo, \"wörld\" \\ {braces} 'quotes'\ttab\nline 🚀"
        let date = Timestamp(timeIntervalSince1970: 1_764_424_685.123456)
        let uuid = APNsID()
        let bytes = PGBytes((0...255).map { UInt8($0) })
        let result = try connection.query(
            """
            SELECT $1::text, $2::int8, $3::int4, $4::int2, $5::float8, $6::float8, $7::float8, $8::bool, $9::bool,
                   $10::timestamptz, $11::uuid, $12::bytea, $13::int8[], $14::text[], $15::text, $16::text, $17::json::text
            """,
            [text, Int64.min, Int32.max, Int16.min, 0.1, Double.infinity, -1.5e-300, true, false,
             date, uuid, bytes, [Int64(1), -2, Int64.max], ["a,b", "c\"d", "e\\f", "", "NULL"], "", String?.none,
             #"{"aps":{"alert":"hi"}}"#])
        let row = result[0]
        #expect(try row.get(0, as: String.self) == text)
        #expect(try row.get(1, as: Int64.self) == Int64.min)
        #expect(try row.get(2, as: Int32.self) == Int32.max)
        #expect(try row.get(3, as: Int16.self) == Int16.min)
        #expect(try row.get(4, as: Double.self) == 0.1)
        #expect(try row.get(5, as: Double.self) == Double.infinity)
        #expect(try row.get(6, as: Double.self) == -1.5e-300)
        #expect(try row.get(7, as: Bool.self) == true)
        #expect(try row.get(8, as: Bool.self) == false)
        let readDate = try #require(try row.get(9, as: Timestamp.self))
        #expect(abs(readDate.timeIntervalSince1970 - date.timeIntervalSince1970) < 0.000_001)
        #expect(try row.get(10, as: APNsID.self) == uuid)
        #expect(try row.get(11, as: PGBytes.self) == bytes)
        #expect(try row.get(12, as: [Int64].self) == [1, -2, Int64.max])
        #expect(try row.get(13, as: [String].self) == ["a,b", "c\"d", "e\\f", "", "NULL"])
        #expect(try row.get(14, as: String.self) == "")
        #expect(row.isNull(15))
        #expect(try row.get(15, as: String.self) == nil)
        #expect(try row.get(16, as: String.self) == #"{"aps":{"alert":"hi"}}"#)
    }

    @Test func nanAndNegativeInfinityRoundTrip() throws {
        let connection = try TestDatabase.connect()
        let row = try connection.query("SELECT $1::float8, $2::float8", [Double.nan, -Double.infinity])[0]
        #expect(try row.require(0, as: Double.self).isNaN)
        #expect(try row.get(1, as: Double.self) == -Double.infinity)
    }

    @Test func datesBeforeTheEpochAndFarAheadRoundTrip() throws {
        let connection = try TestDatabase.connect()
        for seconds in [-2_208_988_800.5, 0, 4_102_444_800.000001] {
            let date = Timestamp(timeIntervalSince1970: seconds)
            let read = try connection.query("SELECT $1::timestamptz", [date]).require(Timestamp.self, row: 0, column: 0)
            #expect(abs(read.timeIntervalSince1970 - seconds) < 0.000_002, "\(seconds)")
        }
    }

    @Test func decodingTheWrongTypeSaysWhichColumn() throws {
        let connection = try TestDatabase.connect()
        let result = try connection.query("SELECT 'abc'::text AS label")
        #expect {
            _ = try result.get(Int64.self, row: 0, column: 0)
        } throws: { error in
            (error as? PGError)?.message.contains("label") == true
        }
    }

    @Test func syntaxErrorCarriesItsSQLSTATE() throws {
        let connection = try TestDatabase.connect()
        do {
            try connection.query("SELEC 1")
            Issue.record("a syntax error was accepted")
        } catch let error as PGError {
            #expect(error.code == .syntaxError)
            #expect(error.code.raw == "42601")
            #expect(error.message.contains("syntax error"))
            #expect(error.statement == "SELEC 1")
        }
        // The connection stays usable after an error.
        #expect(try connection.query("SELECT 1").require(Int.self, row: 0, column: 0) == 1)
    }

    @Test func constraintViolationNamesTheConstraint() throws {
        let connection = try TestDatabase.connect()
        let table = TestDatabase.uniqueName("unique_test")
        try connection.execute(script: "CREATE TABLE \(table) (id int CONSTRAINT \(table)_pk PRIMARY KEY)")
        defer { _ = try? connection.execute(script: "DROP TABLE \(table)") }
        try connection.query("INSERT INTO \(table) VALUES ($1)", [1])
        do {
            try connection.query("INSERT INTO \(table) VALUES ($1)", [1])
            Issue.record("duplicate key accepted")
        } catch let error as PGError {
            #expect(error.code == .uniqueViolation)
            #expect(error.constraint == "\(table)_pk")
            #expect(error.table == table)
        }
    }

    @Test func transactionCommitsOrRollsBack() throws {
        let connection = try TestDatabase.connect()
        let table = TestDatabase.uniqueName("tx_test")
        try connection.execute(script: "CREATE TABLE \(table) (id int)")
        defer { _ = try? connection.execute(script: "DROP TABLE \(table)") }
        try connection.transaction {
            try connection.query("INSERT INTO \(table) VALUES (1)")
        }
        struct Abort: Error {}
        #expect(throws: Abort.self) {
            try connection.transaction {
                try connection.query("INSERT INTO \(table) VALUES (2)")
                throw Abort()
            }
        }
        let ids = try connection.query("SELECT id FROM \(table) ORDER BY id").rows.map { try $0.require(0, as: Int.self) }
        #expect(ids == [1])
    }

    @Test func beginAndQueryLeavesItsTransactionOpenForTheCallerToCommitOrRollBack() throws {
        let connection = try TestDatabase.connect()
        let other = try TestDatabase.connect()
        let table = TestDatabase.uniqueName("pipelined")
        try connection.execute(script: "CREATE TABLE \(table) (id int)")
        defer { _ = try? connection.execute(script: "DROP TABLE \(table)") }
        let insert = try connection.prepare("INSERT INTO \(table) VALUES ($1) RETURNING id * 10")
        let count = { try other.query("SELECT count(*) FROM \(table)").require(Int64.self, row: 0, column: 0) }

        #expect(try connection.beginAndQuery(insert, [1]).require(Int64.self, row: 0, column: 0) == 10)
        #expect(try count() == 0)
        try connection.execute(script: "COMMIT")
        #expect(try count() == 1)

        try connection.beginAndQuery(insert, [2])
        try connection.execute(script: "ROLLBACK")
        #expect(try count() == 1)
    }

    @Test func aStatementFailingInBeginAndQueryLeavesAnAbortedTransactionThatARollbackEnds() throws {
        let connection = try TestDatabase.connect()
        let divide = try connection.prepare("SELECT 1 / $1::int")
        #expect {
            try connection.beginAndQuery(divide, [0])
        } throws: { error in
            (error as? PGError)?.code == PGError.Code("22012")
        }
        // Still inside the transaction BEGIN opened, now aborted.
        #expect {
            try connection.query("SELECT 1")
        } throws: { error in
            (error as? PGError)?.code == PGError.Code("25P02")
        }
        try connection.execute(script: "ROLLBACK")
        #expect(try connection.beginAndQuery(divide, [1]).require(Int32.self, row: 0, column: 0) == 1)
        try connection.execute(script: "COMMIT")
    }

    @Test func preparedStatementRunsManyTimes() throws {
        let connection = try TestDatabase.connect()
        let statement = try connection.prepare("SELECT $1::int8 * 2")
        #expect(statement.parameterCount == 1)
        for value in [Int64(1), 21, -4] {
            #expect(try connection.query(statement, [value]).require(Int64.self, row: 0, column: 0) == value * 2)
        }
    }

    @Test func nulByteInAParameterIsAClearError() throws {
        let connection = try TestDatabase.connect()
        #expect {
            try connection.query("SELECT $1::text", ["a\u{0}b"])
        } throws: { error in
            (error as? PGError)?.message.contains("$1 contains a NUL byte") == true
        }
    }

    @Test func notifyFromAnotherConnectionEndsTheWaitLongBeforeItsTimeOut() throws {
        let listener = try TestDatabase.connect()
        let sender = try TestDatabase.connect()
        let channel = TestDatabase.uniqueName("chan")
        try listener.listen(channel)
        // Nothing is queued yet: a short wait times out empty.
        #expect(try listener.waitForNotifications(timeoutMilliseconds: 10).isEmpty)

        let start = ContinuousClock.now
        try sender.notify(channel, payload: "wake")
        // The wait returns on the notification, not at its time-out: bounded well under the
        // time-out, loose enough for a loaded machine's scheduler.
        let received = try listener.waitForNotifications(timeoutMilliseconds: 5_000)
        let elapsed = ContinuousClock.now - start
        #expect(received == [PGNotification(channel: channel, payload: "wake", senderPID: sender.backendPID)])
        #expect(elapsed < .milliseconds(1_000))

        try listener.unlisten(channel)
        try sender.notify(channel, payload: "ignored")
        #expect(try listener.waitForNotifications(timeoutMilliseconds: 20).isEmpty)
    }

    @Test func copyInLoads100000Rows() throws {
        let connection = try TestDatabase.connect()
        let table = TestDatabase.uniqueName("copy_test")
        try connection.execute(script: "CREATE TABLE \(table) (id int8, token text, note text)")
        defer { _ = try? connection.execute(script: "DROP TABLE \(table)") }
        let copied = try connection.copyIn("COPY \(table) (id, token, note) FROM STDIN") { writer in
            for id in 0..<100_000 {
                let note: String? = id % 1000 == 0 ? nil : (id == 7 ? "tab\there\nnewline \\ back" : "n")
                try writer.writeRow([String(id), String(repeating: "a", count: 64), note])
            }
        }
        #expect(copied == 100_000)
        let summary = try connection.query("SELECT count(*), sum(id), count(note) FROM \(table)")[0]
        #expect(try summary.get(0, as: Int64.self) == 100_000)
        #expect(try summary.get(1, as: Int64.self) == 4_999_950_000)
        #expect(try summary.get(2, as: Int64.self) == 99_900)
        let special = try connection.query("SELECT note FROM \(table) WHERE id = 7").require(String.self, row: 0, column: 0)
        #expect(special == "tab\there\nnewline \\ back")
    }

    @Test func copyAbortedByTheWriterLeavesNothing() throws {
        let connection = try TestDatabase.connect()
        let table = TestDatabase.uniqueName("copy_abort")
        try connection.execute(script: "CREATE TABLE \(table) (id int8)")
        defer { _ = try? connection.execute(script: "DROP TABLE \(table)") }
        struct Stop: Error {}
        #expect(throws: Stop.self) {
            try connection.copyIn("COPY \(table) FROM STDIN") { writer in
                try writer.writeRow(["1"])
                throw Stop()
            }
        }
        #expect(try connection.query("SELECT count(*) FROM \(table)").require(Int.self, row: 0, column: 0) == 0)
    }

    @Test func copyWithABadRowReportsTheServerError() throws {
        let connection = try TestDatabase.connect()
        let table = TestDatabase.uniqueName("copy_bad")
        try connection.execute(script: "CREATE TABLE \(table) (id int8)")
        defer { _ = try? connection.execute(script: "DROP TABLE \(table)") }
        #expect {
            try connection.copyIn("COPY \(table) FROM STDIN") { writer in
                try writer.writeRow(["1"])
                try writer.writeRow(["not a number"])
            }
        } throws: { error in
            (error as? PGError)?.code == .invalidTextRepresentation
        }
        #expect(try connection.query("SELECT 1").require(Int.self, row: 0, column: 0) == 1)
    }
}
