internal import CYAML

/// The YAML parser the configuration file is read with.
enum YAMLLibrary {
    /// libyaml's version, for example "0.2.5".
    static var version: String { String(cString: pushd_yaml_version_string()) }
}
