//! What [`crate::methods!`] expands to: arguments parsed from the call's JSON input, the
//! method's result written back as JSON, its error turned into a failed call.

use std::fmt::Display;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::env;

/// A method's arguments: a JSON object by name or a JSON array by position; an empty input
/// is no arguments.
pub struct Args {
    method: &'static str,
    given: Given,
}

enum Given {
    ByName(serde_json::Map<String, Value>),
    ByPosition(std::vec::IntoIter<Value>),
}

impl Args {
    /// Parses the call's input for `method`; fails the call if it is not an object or array.
    pub fn parse(method: &'static str) -> Args {
        Self::from_input(method, &env::input())
    }

    fn from_input(method: &'static str, input: &[u8]) -> Args {
        if input.iter().all(u8::is_ascii_whitespace) {
            return Args { method, given: Given::ByName(serde_json::Map::new()) };
        }
        let given = match serde_json::from_slice(input) {
            Ok(Value::Object(map)) => Given::ByName(map),
            Ok(Value::Array(items)) => Given::ByPosition(items.into_iter()),
            Ok(_) => env::abort(&format!(
                "`{method}`: arguments must be a JSON object (by name) or a JSON array (by position)"
            )),
            Err(e) => env::abort(&format!("`{method}`: arguments are not JSON: {e}")),
        };
        Args { method, given }
    }

    /// The next argument, `name`; an absent one reads as `null` (so `Option`s may be left out).
    pub fn take<T: DeserializeOwned>(&mut self, name: &str) -> T {
        let value = match &mut self.given {
            Given::ByName(map) => map.remove(name),
            Given::ByPosition(items) => items.next(),
        };
        let absent = value.is_none();
        serde_json::from_value(value.unwrap_or(Value::Null)).unwrap_or_else(|e| {
            let method = self.method;
            if absent {
                env::abort(&format!("`{method}`: missing argument `{name}`"))
            }
            env::abort(&format!("`{method}`: argument `{name}`: {e}"))
        })
    }

    /// Fails the call if arguments were given that the method does not take.
    pub fn finish(self) {
        let method = self.method;
        match self.given {
            Given::ByName(map) => {
                if let Some(name) = map.keys().next() {
                    env::abort(&format!("`{method}`: unknown argument `{name}`"));
                }
            }
            Given::ByPosition(mut items) => {
                if items.next().is_some() {
                    env::abort(&format!("`{method}`: too many arguments"));
                }
            }
        }
    }
}

/// Returns `value` as the call's JSON result.
pub fn respond<T: Serialize + ?Sized>(value: &T) {
    match serde_json::to_vec(value) {
        Ok(bytes) => env::set_result(&bytes),
        Err(e) => env::abort(&format!("result is not JSON: {e}")),
    }
}

/// Fails the call with `error`'s message.
pub fn fail(error: &dyn Display) -> ! {
    env::abort(&error.to_string())
}

/// Exports methods of an application: each function is kept as written, and exported to the
/// runtime under its name with its arguments read from the call's JSON input (an object by
/// name, or an array by position; absent arguments read as `null`) and its result returned
/// as JSON.
///
/// A function whose return type is written `Result<T, E>` (with `E: Display`) fails the call
/// on `Err` with `E`'s message, and nothing it wrote is kept; any other return type is
/// returned as is; a function without one returns nothing. A panic also fails the call, with
/// its message.
///
/// ```no_run
/// weft_sdk::methods! {
///     /// Sets `key`.
///     pub fn set(key: String, value: String) -> Result<(), weft_sdk::Error> {
///         weft_sdk::state::put(key.as_bytes(), value.as_bytes());
///         Ok(())
///     }
///
///     pub fn get(key: String) -> Option<String> {
///         weft_sdk::state::get(key.as_bytes()).map(|v| String::from_utf8_lossy(&v).into_owned())
///     }
/// }
/// # fn main() {}
/// ```
///
/// Each method's export lives in a module of the same name (`set::set`), which native tests
/// can pass to [`crate::testing::call`].
#[macro_export]
macro_rules! methods {
    () => {};
    (
        $(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> Result<$ok:ty, $err:ty>
        $body:block $($rest:tt)*
    ) => {
        $(#[$meta])* $vis fn $name($($arg: $ty),*) -> Result<$ok, $err> $body
        $crate::__export!(result $name($($arg: $ty),*));
        $crate::methods!($($rest)*);
    };
    (
        $(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty
        $body:block $($rest:tt)*
    ) => {
        $(#[$meta])* $vis fn $name($($arg: $ty),*) -> $ret $body
        $crate::__export!(value $name($($arg: $ty),*));
        $crate::methods!($($rest)*);
    };
    (
        $(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?)
        $body:block $($rest:tt)*
    ) => {
        $(#[$meta])* $vis fn $name($($arg: $ty),*) $body
        $crate::__export!(unit $name($($arg: $ty),*));
        $crate::methods!($($rest)*);
    };
}

/// The export of one method (see [`methods!`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __export {
    ($mode:ident $name:ident($($arg:ident : $ty:ty),*)) => {
        #[doc(hidden)]
        pub mod $name {
            #[allow(unused_imports)]
            use super::*;

            /// The function the runtime calls for this method. (`C-unwind` so that a panic in a
            /// native test unwinds to the test instead of aborting it.)
            // An unmangled export is how the runtime finds the method (it is not otherwise
            // unsafe: the function takes nothing and returns nothing).
            #[allow(unsafe_code)]
            #[unsafe(no_mangle)]
            pub extern "C-unwind" fn $name() {
                $crate::env::install_panic_hook();
                #[allow(unused_mut)]
                let mut args = $crate::__private::Args::parse(stringify!($name));
                $(let $arg: $ty = args.take(stringify!($arg));)*
                args.finish();
                $crate::__finish!($mode super::$name($($arg),*));
            }
        }
    };
}

/// What a method's return value becomes (see [`methods!`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __finish {
    (result $call:expr) => {
        match $call {
            Ok(value) => $crate::__private::respond(&value),
            Err(error) => $crate::__private::fail(&error),
        }
    };
    (value $call:expr) => {
        $crate::__private::respond(&$call)
    };
    (unit $call:expr) => {
        $call
    };
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::testing::{self, MockEnv};

    mod exported {
        use crate::Error;

        crate::methods! {
            /// Doubles `x`.
            pub fn twice(x: i64) -> i64 {
                x * 2
            }

            /// `x` if it is not negative.
            pub fn checked(x: i64) -> Result<i64, Error> {
                crate::ensure!(x >= 0, "{x} is negative");
                Ok(x)
            }

            /// Returns nothing.
            pub fn nothing(_ignored: Option<u8>) {}
        }
    }

    #[test]
    fn exported_methods_take_and_return_json() {
        MockEnv::reset();
        assert_eq!(testing::call(exported::twice::twice, br#"{"x": 21}"#), Some(b"42".to_vec()));
        assert_eq!(testing::call(exported::checked::checked, b"[5]"), Some(b"5".to_vec()));
        assert_eq!(testing::call(exported::nothing::nothing, b""), None);
        assert_eq!(exported::twice(4), 8, "the function is kept as written");
    }

    #[test]
    #[should_panic(expected = "-1 is negative")]
    fn an_err_fails_the_call() {
        MockEnv::reset();
        testing::call(exported::checked::checked, b"[-1]");
    }

    fn parsed(input: &str) -> Args {
        Args::from_input("m", input.as_bytes())
    }

    #[test]
    fn by_name_by_position_and_absent() {
        let mut args = parsed(r#"{"b": 2, "a": "x"}"#);
        assert_eq!(args.take::<String>("a"), "x");
        assert_eq!(args.take::<u32>("b"), 2);
        assert_eq!(args.take::<Option<u32>>("c"), None);
        args.finish();
        let mut args = parsed(r#"["x", 2]"#);
        assert_eq!(args.take::<String>("a"), "x");
        assert_eq!(args.take::<u32>("b"), 2);
        args.finish();
        parsed("  ").finish();
    }

    #[test]
    #[should_panic(expected = "`m`: missing argument `a`")]
    fn missing_argument_fails() {
        parsed("{}").take::<String>("a");
    }

    #[test]
    #[should_panic(expected = "`m`: unknown argument `z`")]
    fn unknown_argument_fails() {
        parsed(r#"{"z": 1}"#).finish();
    }

    #[test]
    #[should_panic(expected = "arguments must be a JSON object")]
    fn scalar_input_fails() {
        parsed("3");
    }
}
