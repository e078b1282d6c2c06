import PushdTestSupport
import QueueStore
import Testing

@Suite struct PGConnectionStringTests {
    @Test(arguments: [
        ("postgresql://app:s3cret@db.internal:5432/pushd", "postgresql://app:***@db.internal:5432/pushd"),
        ("postgresql://app:s3c/r@t@db/pushd", "postgresql://app:***@db/pushd"),
        ("postgresql://app@db/pushd?password=s3cret&sslmode=require", "postgresql://app@db/pushd?password=***&sslmode=require"),
        ("postgres://db/pushd?sslmode=require&sslpassword=s3cret", "postgres://db/pushd?sslmode=require&sslpassword=***"),
        ("postgresql://db/pushd?pass%77ord=s3cret", "postgresql://db/pushd?pass%77ord=***"),
        ("postgresql://app@db/pushd", "postgresql://app@db/pushd"),
    ])
    func urlFormsAreMasked(_ url: String, _ expected: String) {
        #expect(PGConnectionString(url).redacted == expected)
    }

    @Test(arguments: [
        ("host=db password=s3cret dbname=pushd", "host=db password=*** dbname=pushd"),
        ("host=db password = 's3 cr\\'et' dbname=pushd", "host=db password = *** dbname=pushd"),
        ("host=db sslpassword=s3cret", "host=db sslpassword=***"),
        ("host=db password='never closed s3cret", "host=db password=***"),
        ("host=db password", "host=db password***"),
        ("host=db user=app", "host=db user=app"),
    ])
    func keywordFormsAreMasked(_ conninfo: String, _ expected: String) {
        let redacted = PGConnectionString(conninfo).redacted
        #expect(redacted == expected)
        #expect(!redacted.contains("s3"))
    }

    @Test func scrubRemovesTheSecretAsLibpqDecodedIt() {
        let connection = PGConnectionString("postgresql://app:p%40ss%20word@db/pushd")
        #expect(connection.scrub("error near \"p@ss word\" and p%40ss%20word") == "error near \"***\" and ***")
        let keywords = PGConnectionString("host=db password='it\\'s s3cret'")
        #expect(keywords.scrub("quoted it's s3cret here") == "quoted *** here")
    }

    @Test func aRefusedConnectionErrorCarriesNoPassword() throws {
        for url in ["postgresql://pushd@127.0.0.1:1/pushd?password=Refused-S3cret",
                    "host=127.0.0.1 port=1 password='Refused-S3cret'"] {
            do {
                _ = try PGConnection(url: url)
                Issue.record("connecting to port 1 succeeded")
            } catch {
                #expect(!"\(error)".contains("Refused-S3cret"), "\(error)")
                #expect("\(error)".contains("127.0.0.1"), "\(error)")
            }
        }
    }

    @Test func aLibpqParseErrorQuotingThePasswordIsScrubbed() throws {
        do {
            _ = try PGConnection(url: "postgresql://pushd@127.0.0.1:1/pushd?password=%zzParse-S3cret")
            Issue.record("a malformed URL connected")
        } catch {
            #expect(!"\(error)".contains("Parse-S3cret"), "\(error)")
        }
    }
}
