//! Loading a PJRT plugin and reaching the functions of its API table.
//!
//! A plugin is loaded once per path and never unloaded: XLA plugins keep threads and global state
//! that do not survive `dlclose`.

use std::collections::HashMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::{ErrorCode, PjrtError, Result};
use crate::sys;

/// A loaded PJRT plugin: its API table and where it came from.
pub struct Plugin {
    api: &'static sys::PJRT_Api,
    path: PathBuf,
}

// SAFETY: the PJRT API table is immutable after `GetPjrtApi` returns and its functions are
// documented as thread-safe.
unsafe impl Send for Plugin {}
// SAFETY: as above.
unsafe impl Sync for Plugin {}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (major, minor) = self.api_version();
        write!(
            f,
            "Plugin({}, PJRT C API {major}.{minor})",
            self.path.display()
        )
    }
}

fn loaded_plugins() -> &'static Mutex<HashMap<PathBuf, &'static Plugin>> {
    static PLUGINS: OnceLock<Mutex<HashMap<PathBuf, &'static Plugin>>> = OnceLock::new();
    PLUGINS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Calls a function of the API table, checking that the plugin's table is new enough to have it.
macro_rules! api_call {
    ($plugin:expr, $name:ident, $args:expr) => {{
        let plugin: &$crate::plugin::Plugin = $plugin;
        let function = plugin.function(
            std::mem::offset_of!($crate::sys::PJRT_Api, $name),
            plugin.api().$name,
            stringify!($name),
        )?;
        // SAFETY: `function` comes from the plugin's API table and `$args` is a properly
        // initialised argument struct whose `struct_size` is set.
        let error = unsafe { function($args) };
        plugin.check(error, stringify!($name))
    }};
}
pub(crate) use api_call;

impl Plugin {
    /// Loads the plugin at `path` (or returns the one already loaded from there) and initialises it.
    pub fn load(path: &Path) -> Result<&'static Plugin> {
        let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let mut plugins = loaded_plugins().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(plugin) = plugins.get(&key) {
            return Ok(plugin);
        }
        // Loading and initialising may log the plugin's first lines (see `quiet_stderr`).
        let plugin = crate::quiet_stderr::without_client_chatter(|| -> Result<&'static Plugin> {
            let plugin: &'static Plugin = Box::leak(Box::new(Self::open(&key)?));
            plugin.initialize()?;
            Ok(plugin)
        })?;
        plugins.insert(key, plugin);
        Ok(plugin)
    }

    /// Finds a plugin with [`crate::find_plugin`] and loads it.
    pub fn discover(explicit: Option<&Path>) -> Result<&'static Plugin> {
        Self::load(&crate::discovery::find_plugin(explicit)?)
    }

    fn open(path: &Path) -> Result<Plugin> {
        // SAFETY: loading a shared library runs its initialisers; a PJRT plugin's are benign.
        let library =
            unsafe { libloading::Library::new(path) }.map_err(|e| PjrtError::PluginLoad {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        type GetApi = unsafe extern "C" fn() -> *const sys::PJRT_Api;
        // SAFETY: `GetPjrtApi` has this signature in every PJRT plugin.
        let get_api = unsafe { library.get::<GetApi>(b"GetPjrtApi\0") }.map_err(|e| {
            PjrtError::NotAPlugin {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        })?;
        // SAFETY: the plugin returns a pointer to a static table (or null).
        let api = unsafe { get_api().as_ref() }.ok_or_else(|| PjrtError::NotAPlugin {
            path: path.to_path_buf(),
            reason: "GetPjrtApi returned null".into(),
        })?;
        std::mem::forget(library);
        let plugin = Plugin {
            api,
            path: path.to_path_buf(),
        };
        plugin.check_version()?;
        Ok(plugin)
    }

    fn check_version(&self) -> Result<()> {
        let (major, minor) = self.api_version();
        if major != sys::PJRT_API_MAJOR as i32 {
            return Err(PjrtError::ApiVersion {
                path: self.path.clone(),
                plugin_major: major,
                plugin_minor: minor,
                built_major: sys::PJRT_API_MAJOR as i32,
                built_minor: sys::PJRT_API_MINOR as i32,
            });
        }
        Ok(())
    }

    fn initialize(&self) -> Result<()> {
        let mut args = sys::PJRT_Plugin_Initialize_Args {
            struct_size: size_of::<sys::PJRT_Plugin_Initialize_Args>(),
            ..Default::default()
        };
        api_call!(self, PJRT_Plugin_Initialize, &mut args)
    }

    /// The plugin's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The PJRT C API version the plugin implements, as `(major, minor)`.
    pub fn api_version(&self) -> (i32, i32) {
        let version = &self.api.pjrt_api_version;
        (version.major_version, version.minor_version)
    }

    pub(crate) fn api(&self) -> &sys::PJRT_Api {
        self.api
    }

    /// Returns the function of the table at `offset`, or an error if the plugin's table is too
    /// short to hold it or leaves it null.
    pub(crate) fn function<F>(
        &self,
        offset: usize,
        function: Option<F>,
        name: &'static str,
    ) -> Result<F> {
        let missing = || PjrtError::MissingFunction {
            path: self.path.clone(),
            function: name,
        };
        if offset >= self.api.struct_size {
            return Err(missing());
        }
        function.ok_or_else(missing)
    }

    /// Turns a returned `PJRT_Error*` into a result, destroying the error.
    pub(crate) fn check(&self, error: *mut sys::PJRT_Error, function: &'static str) -> Result<()> {
        if error.is_null() {
            return Ok(());
        }
        let message = self.error_message(error);
        let code = self.error_code(error);
        if let Some(destroy) = self.api.PJRT_Error_Destroy {
            let mut args = sys::PJRT_Error_Destroy_Args {
                struct_size: size_of::<sys::PJRT_Error_Destroy_Args>(),
                error,
                ..Default::default()
            };
            // SAFETY: `error` is a live error returned by this plugin.
            unsafe { destroy(&mut args) };
        }
        Err(PjrtError::Call {
            function,
            code,
            message,
        })
    }

    fn error_message(&self, error: *mut sys::PJRT_Error) -> String {
        let Some(message_fn) = self.api.PJRT_Error_Message else {
            return "(the plugin gave no message)".into();
        };
        let mut args = sys::PJRT_Error_Message_Args {
            struct_size: size_of::<sys::PJRT_Error_Message_Args>(),
            error,
            ..Default::default()
        };
        // SAFETY: `error` is live; the message points into it until it is destroyed.
        unsafe {
            message_fn(&mut args);
            crate::util::string_from_raw(args.message, args.message_size)
        }
    }

    fn error_code(&self, error: *mut sys::PJRT_Error) -> ErrorCode {
        let Some(code_fn) = self.api.PJRT_Error_GetCode else {
            return ErrorCode::Unknown;
        };
        let mut args = sys::PJRT_Error_GetCode_Args {
            struct_size: size_of::<sys::PJRT_Error_GetCode_Args>(),
            error,
            ..Default::default()
        };
        // SAFETY: `error` is live.
        let failed = unsafe { code_fn(&mut args) };
        if failed.is_null() {
            ErrorCode::from_raw(args.code.0 as i32)
        } else {
            ErrorCode::Unknown
        }
    }
}

/// Reads a NUL-terminated C string, lossily.
#[allow(dead_code)]
pub(crate) fn c_str(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: callers pass NUL-terminated strings owned by the plugin.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}
