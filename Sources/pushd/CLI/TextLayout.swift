/// Column layout for the CLI's tables and help text.
extension StringProtocol {
    /// Cut or filled with spaces on the right to exactly `width` characters.
    func padded(to width: Int) -> String {
        count >= width ? String(prefix(width)) : String(self) + String(repeating: " ", count: width - count)
    }

    /// Without the spaces at either end.
    func trimmingSpaces() -> String {
        String(drop(while: { $0 == " " }).reversed().drop(while: { $0 == " " }).reversed())
    }
}
